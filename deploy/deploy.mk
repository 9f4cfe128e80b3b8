# deploy/: systemd unit, tmpfiles/sysusers, example configs, the CPU drop-in tool.
SYSCONFDIR     ?= /etc
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR         ?= $(PREFIX)/share/doc/locus

INSTALL_EXTRA += install-deploy

.PHONY: install-deploy
install-deploy:
	install -d $(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(PREFIX)/lib/tmpfiles.d \
		$(DESTDIR)$(PREFIX)/lib/sysusers.d $(DESTDIR)$(SYSCONFDIR)/locus \
		$(DESTDIR)$(DOCDIR) $(DESTDIR)$(PREFIX)/bin
	sed -e 's|@BINDIR@|$(PREFIX)/bin|g' -e 's|@DOCDIR@|$(DOCDIR)|g' \
		deploy/locusd@.service.in > $(DESTDIR)$(SYSTEMDUNITDIR)/locusd@.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/locusd@.service
	install -m 0644 deploy/locus-tmpfiles.conf $(DESTDIR)$(PREFIX)/lib/tmpfiles.d/locus.conf
	install -m 0644 deploy/locus-sysusers.conf $(DESTDIR)$(PREFIX)/lib/sysusers.d/locus.conf
	install -m 0644 deploy/default.conf $(DESTDIR)$(SYSCONFDIR)/locus/default.conf.example
	install -m 0644 deploy/two-node.conf $(DESTDIR)$(SYSCONFDIR)/locus/two-node.conf.example
	install -m 0644 deploy/rails.conf $(DESTDIR)$(SYSCONFDIR)/locus/rails.conf.example
	install -m 0644 deploy/rails-auto.conf $(DESTDIR)$(SYSCONFDIR)/locus/rails-auto.conf.example
	install -m 0755 deploy/locusd-cpus $(DESTDIR)$(PREFIX)/bin/locusd-cpus
	install -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md

EXTRA_TESTS += tests/test_deploy.sh
