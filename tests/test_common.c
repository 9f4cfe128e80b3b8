// SPDX-License-Identifier: MIT
/* Error reports and CRC32C: known-answer vectors from RFC 3720 (iSCSI). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <cmocka.h>

#include "locus_crc32c.h"
#include "locus_crc32c_priv.h"
#include "locus_err.h"
#include "locus_err_priv.h"
#include "locus_tblfile.h"
#include "locus_tblfile_priv.h"

static void test_crc32c_known_answers(void **state)
{
	uint8_t buf[48];
	(void)state;

	assert_int_equal(locus_crc32c("123456789", 9), 0xe3069283u);
	memset(buf, 0, 32);
	assert_int_equal(locus_crc32c(buf, 32), 0x8a9136aau);
	memset(buf, 0xff, 32);
	assert_int_equal(locus_crc32c(buf, 32), 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)i;
	assert_int_equal(locus_crc32c(buf, 32), 0x46dd794eu);
	for (int i = 0; i < 32; i++)
		buf[i] = (uint8_t)(31 - i);
	assert_int_equal(locus_crc32c(buf, 32), 0x113fdb5cu);
	assert_int_equal(locus_crc32c(buf, 0), 0u);
}

static void test_crc32c_paths_agree(void **state)
{
	uint8_t buf[4099];
	(void)state;

	srand(7);
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = (uint8_t)rand();
	/* every alignment and length mix, split updates included */
	for (size_t off = 0; off < 9; off++) {
		for (size_t len = 0; len + off <= sizeof(buf); len += 37) {
			uint32_t hw = locus_crc32c(buf + off, len);
			uint32_t sw = locus_crc32c_sw_update(0, buf + off, len);
			uint32_t split = locus_crc32c_update(
				locus_crc32c_update(0, buf + off, len / 3),
				buf + off + len / 3, len - len / 3);

			assert_int_equal(hw, sw);
			assert_int_equal(hw, split);
		}
	}
}

static void test_error_report(void **state)
{
	struct locus_error e;
	(void)state;

	assert_int_equal(locus_error_set(&e, LOCUS_ERANGE, "id %d >= %d", 17, 16),
			 -LOCUS_ERANGE);
	assert_int_equal(e.code, LOCUS_ERANGE);
	assert_string_equal(e.msg, "id 17 >= 16");
	assert_int_equal(locus_error_set(NULL, -EINVAL, "x"), -EINVAL);
	assert_string_equal(locus_strerror(-LOCUS_EBADMAGIC), "bad magic");
	assert_string_equal(locus_strerror(ENOENT), strerror(ENOENT));
	for (int c = LOCUS_E_BASE + 1; c < LOCUS_E_END; c++)
		assert_non_null(locus_strerror(c));
	locus_error_clear(&e);
	assert_int_equal(e.code, 0);
}

static void test_tblfile_seal_and_check(void **state)
{
	uint8_t buf[64 + 100], bad[sizeof(buf) + 1];
	const void *payload;
	size_t plen;
	struct locus_error e;
	char path[] = "/tmp/locus-tbl-XXXXXX";
	void *rd;
	size_t rdlen;
	int fd;
	(void)state;

	for (int i = 0; i < 100; i++)
		buf[64 + i] = (uint8_t)(i * 7);
	assert_int_equal(locus_tbl_seal(buf, sizeof(buf), LOCUS_TBL_ELDR, 3, 100), 0);
	assert_int_equal(locus_tbl_check(buf, sizeof(buf), LOCUS_TBL_ELDR, &payload, &plen, &e), 0);
	assert_ptr_equal(payload, buf + 64);
	assert_int_equal(plen, 100);
	assert_int_equal(locus_tbl_seal(buf, sizeof(buf) - 1, LOCUS_TBL_ELDR, 3, 100), -LOCUS_ERANGE);
	assert_int_equal(locus_tbl_seal(buf, sizeof(buf), 0, 3, 100), -EINVAL);

	/* each defect has its own code */
	assert_int_equal(locus_tbl_check(buf, sizeof(buf), LOCUS_TBL_GRACE, NULL, NULL, &e),
			 -LOCUS_ERANGE);
	assert_non_null(strstr(e.msg, "expected grace"));
	assert_int_equal(locus_tbl_check(buf, 63, 0, NULL, NULL, &e), -LOCUS_ETRUNCATED);
	assert_int_equal(locus_tbl_check(buf, sizeof(buf) - 1, 0, NULL, NULL, &e), -LOCUS_ETRUNCATED);
	memcpy(bad, buf, sizeof(buf));
	bad[sizeof(buf)] = 0;
	assert_int_equal(locus_tbl_check(bad, sizeof(bad), 0, NULL, NULL, &e), -LOCUS_ERANGE);
	bad[64 + 50] ^= 1;
	assert_int_equal(locus_tbl_check(bad, sizeof(buf), 0, NULL, NULL, &e), -LOCUS_ECRC);
	memcpy(bad, buf, sizeof(buf));
	bad[0] ^= 1;
	assert_int_equal(locus_tbl_check(bad, sizeof(buf), 0, NULL, NULL, &e), -LOCUS_EBADMAGIC);
	memcpy(bad, buf, sizeof(buf));
	bad[8] = 9; /* format version */
	assert_int_equal(locus_tbl_check(bad, sizeof(buf), 0, NULL, NULL, &e), -LOCUS_EVERSION);
	memcpy(bad, buf, sizeof(buf));
	bad[20] ^= 0x40; /* payload length, header CRC now wrong */
	assert_int_equal(locus_tbl_check(bad, sizeof(buf), 0, NULL, NULL, &e), -LOCUS_ECRC);

	/* files: round trip, truncated file named in the message */
	fd = mkstemp(path);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(locus_tbl_write_file(path, buf, sizeof(buf), &e), 0);
	assert_int_equal(locus_tbl_read_file(path, LOCUS_TBL_ELDR, &rd, &rdlen, &e), 0);
	assert_int_equal(rdlen, sizeof(buf));
	assert_memory_equal(rd, buf, sizeof(buf));
	free(rd);
	assert_int_equal(truncate(path, 100), 0);
	assert_int_equal(locus_tbl_read_file(path, 0, &rd, &rdlen, &e), -LOCUS_ETRUNCATED);
	assert_non_null(strstr(e.msg, path));
	unlink(path);
	assert_int_equal(locus_tbl_read_file(path, 0, &rd, &rdlen, &e), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc32c_known_answers),
		cmocka_unit_test(test_crc32c_paths_agree),
		cmocka_unit_test(test_error_report),
		cmocka_unit_test(test_tblfile_seal_and_check),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
