# liblocus.so: the client library a serving worker (or the Python package,
# tools/python/) links: the client API (locus_client.h), signature building,
# the table and request formats with their readers, the segment read-only and
# counter reading (what locus-stat uses). Position-independent copies of the
# shm/ objects in $(BUILD)/pic/; only the symbols of shm/liblocus.map are
# exported. The static libraries stay for locusd and the tests. Sanitizer
# and fuzz builds have no shared library.
LIBLOCUS_MAJOR   := 0
LIBLOCUS_VERSION := $(LIBLOCUS_MAJOR).8.0
LIBLOCUS_SONAME  := liblocus.so.$(LIBLOCUS_MAJOR)
LIBLOCUS_SRCS    := shm/client_attach.c shm/client_route.c shm/client_blocks.c \
	shm/client_dispatch.c \
	shm/client_region.c shm/clients.c shm/segment.c shm/proc.c shm/seqpkt.c \
	shm/counters.c shm/eldr_sig.c shm/eldr_table.c shm/blocks.c shm/grace_table.c \
	shm/grace_set.c shm/dispatch.c shm/tblfile.c shm/file.c shm/crc32c.c shm/err.c \
	shm/ring.c shm/placement.c shm/client_placement.c shm/weights.c \
	shm/ep.c shm/ep_ctl.c shm/ep_dispatch.c shm/ep_combine.c
LIBLOCUS_HEADERS := shm/locus.h shm/locus_common.h shm/locus_err.h shm/locus_crc32c.h \
	shm/locus_shm.h shm/locus_counters.h shm/locus_client.h shm/locus_eldr.h \
	shm/locus_blocks.h shm/locus_tblfile.h shm/locus_grace.h shm/locus_graceset.h \
	shm/locus_wire.h shm/locus_dispatch.h shm/locus_placement.h shm/locus_weights.h \
	shm/locus_ep.h
LIBLOCUS_OBJS    := $(patsubst %.c,$(BUILD)/pic/%.o,$(LIBLOCUS_SRCS))
LIBLOCUS         := $(LIBS_DIR)/liblocus.so.$(LIBLOCUS_VERSION)
LIBDIR          ?= $(PREFIX)/lib
INCLUDEDIR      ?= $(PREFIX)/include
PKGCONFIGDIR    ?= $(LIBDIR)/pkgconfig

ifeq ($(SANFLAGS),)
$(BUILD)/pic/shm/%.o: shm/%.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -Ishm $(CFLAGS) -fPIC -c -o $@ $<

# -z defs: every symbol the objects need resolves at link time (no surprise
# at dlopen); the version script names the exports, everything else is local.
$(LIBLOCUS): $(LIBLOCUS_OBJS) shm/liblocus.map
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(LIBLOCUS_SONAME) \
		-Wl,--version-script=shm/liblocus.map -Wl,-z,defs -Wl,-z,relro -Wl,-z,now \
		-o $@ $(LIBLOCUS_OBJS) $(LDLIBS)
	ln -sf $(@F) $(LIBS_DIR)/$(LIBLOCUS_SONAME)
	ln -sf $(LIBLOCUS_SONAME) $(LIBS_DIR)/liblocus.so

ALL_OBJS    += $(LIBLOCUS_OBJS)
ALL_TARGETS += $(LIBLOCUS)
INSTALL_EXTRA += install-lib
endif

.PHONY: install-lib
install-lib: $(LIBLOCUS)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR)/locus $(DESTDIR)$(PKGCONFIGDIR)
	install -m 0755 $(LIBLOCUS) $(DESTDIR)$(LIBDIR)/
	ln -sf liblocus.so.$(LIBLOCUS_VERSION) $(DESTDIR)$(LIBDIR)/$(LIBLOCUS_SONAME)
	ln -sf $(LIBLOCUS_SONAME) $(DESTDIR)$(LIBDIR)/liblocus.so
	install -m 0644 $(LIBLOCUS_HEADERS) $(DESTDIR)$(INCLUDEDIR)/locus/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
		-e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(LIBLOCUS_VERSION)|' \
		shm/locus.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/locus.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/locus.pc

