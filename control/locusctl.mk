# control/: calibration trace importer (shared with GRACE), ELDR fit, locusctl.
$(eval $(call LIBRARY,trace,control/trace.c control/trace_json.c control/trace_write.c \
	control/trace_esft.c))
