# shm/: what a node's processes share. Every library here is plain C on shm/
# headers alone (the layering rule): an object that includes a data-plane or
# control-plane header fails to compile.
$(BUILD)/shm/%.o: INCLUDES = -Ishm

# common: error codes, CRC32C, table files, rings, file helpers.
$(eval $(call LIBRARY,common,shm/err.c shm/crc32c.c shm/tblfile.c shm/ring.c shm/file.c))
# counters: directory + per-lcore blocks in the segment's counters region.
$(eval $(call LIBRARY,counters,shm/counters.c,common))
# the segment (create/attach/remove), the table channels, the push protocol,
# the seqpacket sockets.
$(eval $(call LIBRARY,shm,shm/segment.c shm/proc.c shm/table.c shm/table_writer.c \
	shm/table_reader.c shm/push.c shm/seqpkt.c,common))
# formats: the ELDR signature and table, the GRACE table and placement set,
# the signature cache's ROUTE_BLOCKS / EVICT requests, with their validators.
$(eval $(call LIBRARY,formats,shm/eldr_sig.c shm/eldr_table.c shm/grace_table.c \
	shm/grace_set.c shm/blocks.c shm/placement.c,common))
# wire: the message header and the dispatch / combine / rows payloads.
$(eval $(call LIBRARY,wire,shm/dispatch.c,common))
# client slots: region layout, the daemon's side and the client library.
$(eval $(call LIBRARY,client,shm/clients.c shm/client_attach.c shm/client_region.c \
	shm/client_route.c shm/client_blocks.c shm/client_dispatch.c shm/client_placement.c \
	shm/weights.c shm/ep.c shm/ep_ctl.c shm/ep_dispatch.c shm/ep_combine.c,\
	wire formats shm common))
