# locusd configuration parser (pure C).
$(eval $(call LIBRARY,config,dataplane/config.c))
