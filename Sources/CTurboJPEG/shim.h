// TurboJPEG (libjpeg-turbo 2.1 API: tjInitCompress/tjCompress2/tjDecompressToYUVPlanes).
#ifndef VIEWFINDER_CTURBOJPEG_SHIM_H
#define VIEWFINDER_CTURBOJPEG_SHIM_H
#include <stddef.h>
#include <turbojpeg.h>
#endif
