// Viewfinder's C shim for V4L2.
//
// `VIDIOC_*` request codes and `V4L2_PIX_FMT_*` codes are function-like macros (`_IOWR(...)`,
// `v4l2_fourcc(...)`) that Swift cannot import, so they are re-exported here as constants.
// libv4l2's `v4l2_open`/`v4l2_ioctl` are variadic; the non-variadic wrappers below make them
// callable from Swift. libv4lconvert is the fallback converter for formats the engine does not
// handle natively; the transport is raw `ioctl` on the device node.
#ifndef VIEWFINDER_CV4L2_SHIM_H
#define VIEWFINDER_CV4L2_SHIM_H

#include <linux/videodev2.h>
#include <libv4l2.h>
#include <libv4lconvert.h>
#include <libv4l-plugin.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <poll.h>
#include <fcntl.h>
#include <errno.h>
#include <unistd.h>

static const unsigned long VF_VIDIOC_QUERYCAP = VIDIOC_QUERYCAP;
static const unsigned long VF_VIDIOC_ENUM_FMT = VIDIOC_ENUM_FMT;
static const unsigned long VF_VIDIOC_G_FMT = VIDIOC_G_FMT;
static const unsigned long VF_VIDIOC_S_FMT = VIDIOC_S_FMT;
static const unsigned long VF_VIDIOC_TRY_FMT = VIDIOC_TRY_FMT;
static const unsigned long VF_VIDIOC_REQBUFS = VIDIOC_REQBUFS;
static const unsigned long VF_VIDIOC_QUERYBUF = VIDIOC_QUERYBUF;
static const unsigned long VF_VIDIOC_QBUF = VIDIOC_QBUF;
static const unsigned long VF_VIDIOC_DQBUF = VIDIOC_DQBUF;
static const unsigned long VF_VIDIOC_EXPBUF = VIDIOC_EXPBUF;
static const unsigned long VF_VIDIOC_STREAMON = VIDIOC_STREAMON;
static const unsigned long VF_VIDIOC_STREAMOFF = VIDIOC_STREAMOFF;
static const unsigned long VF_VIDIOC_G_PARM = VIDIOC_G_PARM;
static const unsigned long VF_VIDIOC_S_PARM = VIDIOC_S_PARM;
static const unsigned long VF_VIDIOC_ENUM_FRAMESIZES = VIDIOC_ENUM_FRAMESIZES;
static const unsigned long VF_VIDIOC_ENUM_FRAMEINTERVALS = VIDIOC_ENUM_FRAMEINTERVALS;
static const unsigned long VF_VIDIOC_ENUMINPUT = VIDIOC_ENUMINPUT;
static const unsigned long VF_VIDIOC_G_INPUT = VIDIOC_G_INPUT;
static const unsigned long VF_VIDIOC_S_INPUT = VIDIOC_S_INPUT;
static const unsigned long VF_VIDIOC_QUERYCTRL = VIDIOC_QUERYCTRL;
static const unsigned long VF_VIDIOC_QUERY_EXT_CTRL = VIDIOC_QUERY_EXT_CTRL;
static const unsigned long VF_VIDIOC_QUERYMENU = VIDIOC_QUERYMENU;
static const unsigned long VF_VIDIOC_G_CTRL = VIDIOC_G_CTRL;
static const unsigned long VF_VIDIOC_S_CTRL = VIDIOC_S_CTRL;
static const unsigned long VF_VIDIOC_G_EXT_CTRLS = VIDIOC_G_EXT_CTRLS;
static const unsigned long VF_VIDIOC_S_EXT_CTRLS = VIDIOC_S_EXT_CTRLS;
static const unsigned long VF_VIDIOC_TRY_EXT_CTRLS = VIDIOC_TRY_EXT_CTRLS;
static const unsigned long VF_VIDIOC_SUBSCRIBE_EVENT = VIDIOC_SUBSCRIBE_EVENT;
static const unsigned long VF_VIDIOC_UNSUBSCRIBE_EVENT = VIDIOC_UNSUBSCRIBE_EVENT;
static const unsigned long VF_VIDIOC_DQEVENT = VIDIOC_DQEVENT;
static const unsigned long VF_VIDIOC_G_SELECTION = VIDIOC_G_SELECTION;
static const unsigned long VF_VIDIOC_S_SELECTION = VIDIOC_S_SELECTION;

static const unsigned int VF_PIX_FMT_YUYV = V4L2_PIX_FMT_YUYV;
static const unsigned int VF_PIX_FMT_UYVY = V4L2_PIX_FMT_UYVY;
static const unsigned int VF_PIX_FMT_YVYU = V4L2_PIX_FMT_YVYU;
static const unsigned int VF_PIX_FMT_VYUY = V4L2_PIX_FMT_VYUY;
static const unsigned int VF_PIX_FMT_NV12 = V4L2_PIX_FMT_NV12;
static const unsigned int VF_PIX_FMT_NV21 = V4L2_PIX_FMT_NV21;
static const unsigned int VF_PIX_FMT_NV16 = V4L2_PIX_FMT_NV16;
static const unsigned int VF_PIX_FMT_YUV420 = V4L2_PIX_FMT_YUV420;
static const unsigned int VF_PIX_FMT_YVU420 = V4L2_PIX_FMT_YVU420;
static const unsigned int VF_PIX_FMT_YUV422P = V4L2_PIX_FMT_YUV422P;
static const unsigned int VF_PIX_FMT_GREY = V4L2_PIX_FMT_GREY;
static const unsigned int VF_PIX_FMT_RGB24 = V4L2_PIX_FMT_RGB24;
static const unsigned int VF_PIX_FMT_BGR24 = V4L2_PIX_FMT_BGR24;
static const unsigned int VF_PIX_FMT_MJPEG = V4L2_PIX_FMT_MJPEG;
static const unsigned int VF_PIX_FMT_JPEG = V4L2_PIX_FMT_JPEG;

/// Non-variadic wrapper of libv4l2's `v4l2_ioctl` (Swift cannot call variadic C functions).
static inline int vf_v4l2_ioctl(int fd, unsigned long request, void *arg) {
    return v4l2_ioctl(fd, request, arg);
}
/// Non-variadic wrapper of libv4l2's `v4l2_open`.
static inline int vf_v4l2_open(const char *path, int flags) {
    return v4l2_open(path, flags);
}
/// Non-variadic wrapper of `open(2)` for the syscall shim.
static inline int vf_open(const char *path, int flags) {
    return open(path, flags);
}
/// Plain `ioctl(2)` with a pointer argument; the raw transport of the V4L2 backend.
static inline int vf_ioctl(int fd, unsigned long request, void *arg) {
    return ioctl(fd, request, arg);
}

#endif
