# shm: the segment (create/attach/remove), the table channels and the seqpacket sockets.
$(eval $(call LIBRARY,shm,shm/segment.c shm/proc.c shm/table.c shm/table_writer.c \
	shm/table_reader.c shm/push.c shm/seqpkt.c))
$(eval $(call PROGRAM,tests/test_segment,tests/test_segment.c,shm common,cmocka))
$(eval $(call PROGRAM,tests/test_table,tests/test_table.c,shm common,cmocka))

UNIT_TESTS += tests/test_segment tests/test_table

$(eval $(call PROGRAM,tests/test_table_torture,tests/test_table_torture.c,shm common,cmocka))
UNIT_TESTS += tests/test_table_torture
$(eval $(call PROGRAM,tools/bench_table,tools/bench_table.c,shm common,))
BENCHES += tools/bench_table

# shm/ is what both planes and the clients build on: its objects see shm/
# headers only, so one that includes a data-plane or control-plane header
# fails to compile.
$(BUILD)/shm/%.o: INCLUDES = -Ishm
