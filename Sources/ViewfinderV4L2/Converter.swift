#if canImport(Glibc)
import Glibc
#endif
import CV4L2
import Viewfinder

/// What libv4lconvert's C callbacks reach: the camera's syscall shim (so conversion also works
/// against the fake kernel).
private final class ConverterContext {
    let syscalls: any V4L2Syscalls
    init(_ s: any V4L2Syscalls) { syscalls = s }
}

private func converterIoctl(_ priv: UnsafeMutableRawPointer?, _ fd: Int32, _ request: UInt, _ arg: UnsafeMutableRawPointer?) -> Int32 {
    guard let priv, let arg else { errno = EINVAL; return -1 }
    let ctx = Unmanaged<ConverterContext>.fromOpaque(priv).takeUnretainedValue()
    switch retryingInterrupts({ ctx.syscalls.ioctl(fd, request, arg) }) {
    case .success(let r): return r
    case .failure(let e): errno = e.rawValue; return -1
    }
}

private func converterRead(_ priv: UnsafeMutableRawPointer?, _ fd: Int32, _ buf: UnsafeMutableRawPointer?, _ n: Int) -> Int {
    errno = ENOSYS // streaming only: read() I/O is never used
    return -1
}

private func converterWrite(_ priv: UnsafeMutableRawPointer?, _ fd: Int32, _ buf: UnsafeRawPointer?, _ n: Int) -> Int {
    errno = ENOSYS
    return -1
}

/// The callback table handed to libv4lconvert. Written once here and never mutated afterwards;
/// libv4lconvert only reads it, so sharing it between threads is safe.
nonisolated(unsafe) private let converterDevOps: UnsafeMutablePointer<libv4l_dev_ops> = {
    let p = UnsafeMutablePointer<libv4l_dev_ops>.allocate(capacity: 1)
    p.initialize(to: libv4l_dev_ops())
    p.pointee.ioctl = converterIoctl
    p.pointee.read = converterRead
    p.pointee.write = converterWrite
    return p
}()

/// libv4lconvert's reason for a failed conversion (a damaged frame).
struct ConversionFailure: Error { let message: String }

/// libv4lconvert, the fallback for pixel formats the engine does not handle (Bayer, RGB565,
/// YVYU, …): it converts a device format into RGB24 or YU12 (`PixelFormat.rgb24`,
/// `PixelFormat.i420`). Used by one thread at a time (the capture thread).
final class V4L2Converter {
    private let data: OpaquePointer
    private let context: Unmanaged<ConverterContext>
    let fd: Int32

    /// Destination formats libv4lconvert produces that the engine handles.
    static let engineDestinations: [PixelFormat] = [.rgb24, .i420]

    init?(handle: V4L2Handle) {
        let ctx = Unmanaged.passRetained(ConverterContext(handle.syscalls))
        guard let d = v4lconvert_create_with_dev_ops(handle.fd, ctx.toOpaque(), converterDevOps) else {
            ctx.release()
            return nil
        }
        data = d
        context = ctx
        fd = handle.fd
    }

    deinit {
        v4lconvert_destroy(data)
        context.release()
    }

    var errorMessage: String { v4lconvert_get_error_message(data).map { String(cString: $0) } ?? "unknown libv4lconvert error" }

    /// The device format to request so that libv4lconvert can produce `fourcc` at about this size.
    func plan(fourcc: UInt32, width: Int, height: Int) -> (source: v4l2_format, destination: v4l2_format)? {
        var dest = v4l2_format()
        dest.type = V4L2.bufTypeVideoCapture
        dest.fmt.pix.pixelformat = fourcc
        dest.fmt.pix.width = UInt32(clamping: width)
        dest.fmt.pix.height = UInt32(clamping: height)
        dest.fmt.pix.field = V4L2.fieldNone
        var src = v4l2_format()
        guard v4lconvert_try_format(data, &dest, &src) == 0, dest.fmt.pix.pixelformat == fourcc else { return nil }
        return (src, dest)
    }

    /// Converts one frame; returns the bytes written.
    func convert(source: inout v4l2_format, destination: inout v4l2_format, from src: UnsafeMutableRawPointer, count: Int,
                 to dst: UnsafeMutableRawPointer, capacity: Int) -> Result<Int, ConversionFailure> {
        let r = v4lconvert_convert(data, &source, &destination, src.assumingMemoryBound(to: UInt8.self), Int32(clamping: count),
                                   dst.assumingMemoryBound(to: UInt8.self), Int32(clamping: capacity))
        return r >= 0 ? .success(Int(r)) : .failure(ConversionFailure(message: errorMessage))
    }

    /// A `v4l2_format` describing an engine frame format (for libv4lconvert's destination).
    static func v4l2Format(_ f: FrameFormat) -> v4l2_format {
        var d = v4l2_format()
        d.type = V4L2.bufTypeVideoCapture
        d.fmt.pix.pixelformat = f.pixelFormat.fourcc
        d.fmt.pix.width = UInt32(f.width)
        d.fmt.pix.height = UInt32(f.height)
        d.fmt.pix.field = V4L2.fieldNone
        d.fmt.pix.bytesperline = UInt32(f.bytesPerRow)
        d.fmt.pix.sizeimage = UInt32(f.maxByteCount)
        return d
    }
}
