# deploy/: systemd units, tmpfiles/sysusers, example configs, the CPU drop-in tool.
# Configuration goes under the prefix, as autotools' sysconfdir does, except
# for PREFIX=/usr (a distribution's layout), whose configuration is /etc.
SYSCONFDIR     ?= $(if $(filter /usr,$(PREFIX)),/etc,$(PREFIX)/etc)
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR         ?= $(PREFIX)/share/doc/locus

INSTALL_EXTRA += install-deploy

.PHONY: install-deploy
install-deploy:
	install -d $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(PREFIX)/lib/tmpfiles.d \
		$(DESTDIR)$(PREFIX)/lib/sysusers.d $(DESTDIR)$(SYSCONFDIR)/locus \
		$(DESTDIR)$(DOCDIR) $(DESTDIR)$(PREFIX)/bin
	sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@DOCDIR@|$(DOCDIR)|g' \
		-e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' deploy/locusd@.service.in > $(DESTDIR)$(SYSTEMDUNITDIR)/locusd@.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/locusd@.service
	sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@DOCDIR@|$(DOCDIR)|g' \
		-e 's|@SYSCONFDIR@|$(SYSCONFDIR)|g' deploy/locus-recover@.service.in \
		> $(DESTDIR)$(SYSTEMDUNITDIR)/locus-recover@.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/locus-recover@.service
	install -m 0644 deploy/locus-tmpfiles.conf $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/locus.conf
	install -m 0644 deploy/locus-sysusers.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/locus.conf
	install -m 0644 deploy/default.conf $(DESTDIR)$(SYSCONFDIR)/locus/default.conf.example
	install -m 0644 deploy/two-node.conf $(DESTDIR)$(SYSCONFDIR)/locus/two-node.conf.example
	install -m 0644 deploy/rails.conf $(DESTDIR)$(SYSCONFDIR)/locus/rails.conf.example
	install -m 0644 deploy/rails-auto.conf $(DESTDIR)$(SYSCONFDIR)/locus/rails-auto.conf.example
	sed -e 's|^confdir=.*|confdir=$${LOCUS_CONF_DIR:-$(SYSCONFDIR)/locus}|' \
		deploy/locusd-cpus > $(DESTDIR)$(PREFIX)/bin/locusd-cpus
	chmod 0755 $(DESTDIR)$(PREFIX)/bin/locusd-cpus
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -m 0644 deploy/README.md $(DESTDIR)$(DOCDIR)/deploy.md

