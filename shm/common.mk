# common: error codes, CRC32C, shared definitions (no dependencies).
$(eval $(call LIBRARY,common,shm/err.c shm/crc32c.c shm/tblfile.c shm/ring.c shm/file.c))
