// SPDX-License-Identifier: MIT
/*
 * locus-loadgen --dmabuf: a rank's rows in a dma-buf, the way a serving
 * rank hands GPU memory over. Without a GPU: udmabuf (a memfd's pages as a
 * dma-buf) where /dev/udmabuf exists, else vgem (a DRM dumb buffer exported
 * with PRIME; Debian's kernel builds vgem but not udmabuf). The DRM ioctls
 * are declared here: the build host has no libdrm headers. --host-region:
 * host memory, a memfd sealed against shrinking (Soft-RoCE registers its
 * pages, which it cannot do for vgem's).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/dma-buf.h>
#include <linux/udmabuf.h>

#include "loadgen.h"

struct lg_drm_version {
	int major, minor, patch;
	size_t name_len;
	char *name;
	size_t date_len;
	char *date;
	size_t desc_len;
	char *desc;
};

struct lg_drm_create_dumb {
	uint32_t height, width, bpp, flags;
	uint32_t handle, pitch;
	uint64_t size;
};

struct lg_drm_prime_handle {
	uint32_t handle;
	uint32_t flags;
	int32_t fd;
};

#define LG_DRM_IOCTL_VERSION            _IOWR('d', 0x00, struct lg_drm_version)
#define LG_DRM_IOCTL_PRIME_HANDLE_TO_FD _IOWR('d', 0x2d, struct lg_drm_prime_handle)
#define LG_DRM_IOCTL_MODE_CREATE_DUMB   _IOWR('d', 0xB2, struct lg_drm_create_dumb)

static int from_udmabuf(size_t len, const char **how)
{
	struct udmabuf_create uc = { .flags = UDMABUF_FLAGS_CLOEXEC, .size = len };
	int dev, mfd, fd;

	dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	if (dev < 0)
		return -errno;
	mfd = memfd_create("locus-rows", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (mfd < 0 || ftruncate(mfd, (off_t)len) < 0 ||
	    fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) {
		fd = -errno;
		goto out;
	}
	uc.memfd = (uint32_t)mfd;
	fd = ioctl(dev, UDMABUF_CREATE, &uc);
	if (fd < 0)
		fd = -errno;
	*how = "udmabuf";
out:
	if (mfd >= 0)
		close(mfd); /* the dma-buf holds the pages */
	close(dev);
	return fd;
}

static int from_vgem(size_t len, const char **how)
{
	int ret = -ENOENT;

	for (int i = 0; i < 8; i++) {
		struct lg_drm_create_dumb cd = { .width = 1024, .bpp = 32 };
		struct lg_drm_prime_handle ph = { .flags = O_CLOEXEC | O_RDWR, .fd = -1 };
		struct lg_drm_version v = { 0 };
		char path[32], name[16] = { 0 };
		int dev;

		snprintf(path, sizeof(path), "/dev/dri/card%d", i);
		dev = open(path, O_RDWR | O_CLOEXEC);
		if (dev < 0)
			continue;
		v.name = name;
		v.name_len = sizeof(name) - 1;
		if (ioctl(dev, LG_DRM_IOCTL_VERSION, &v) < 0 || strcmp(name, "vgem")) {
			close(dev);
			continue;
		}
		/* rows of 4 KiB: width 1024 at 32 bpp */
		cd.height = (uint32_t)((len + 4095) / 4096);
		if (ioctl(dev, LG_DRM_IOCTL_MODE_CREATE_DUMB, &cd) < 0) {
			ret = -errno;
			close(dev);
			continue;
		}
		ph.handle = cd.handle;
		ret = ioctl(dev, LG_DRM_IOCTL_PRIME_HANDLE_TO_FD, &ph) < 0 ? -errno : ph.fd;
		close(dev); /* the exported dma-buf keeps the buffer alive */
		*how = "vgem";
		return ret;
	}
	return ret;
}

int lg_dmabuf_create(size_t len, const char **how)
{
	int fd = from_udmabuf(len, how);

	if (fd >= 0)
		return fd;
	return from_vgem(len, how);
}

int lg_hostmem_create(size_t len, const char **how)
{
	int fd = memfd_create("locus-rows", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	/* sealed against shrinking: what locusd takes as host memory */
	if (ftruncate(fd, (off_t)len) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) < 0) {
		int ret = -errno;

		close(fd);
		return ret;
	}
	*how = "memfd";
	return fd;
}

void *lg_dmabuf_map(int fd, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* CPU access brackets: exporters with caches or bounce buffers need them. */
void lg_dmabuf_sync(int fd, int start)
{
	struct dma_buf_sync s = { .flags = (start ? DMA_BUF_SYNC_START : DMA_BUF_SYNC_END) |
					   DMA_BUF_SYNC_RW };

	while (ioctl(fd, DMA_BUF_IOCTL_SYNC, &s) < 0 && errno == EINTR)
		;
}
