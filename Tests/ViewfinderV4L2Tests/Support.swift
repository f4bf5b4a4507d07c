import Testing
import Logging
import CTurboJPEG
@testable import Viewfinder
@testable import ViewfinderV4L2
import ViewfinderTestSupport

/// A logger that stays quiet in tests.
let quietLogger: Logger = {
    var l = Logger(label: "test.v4l2")
    l.logLevel = .critical
    return l
}()

func makeKernel(_ specs: [FakeV4L2Kernel.DeviceSpec] = [.webcam()]) -> FakeV4L2Kernel {
    FakeV4L2Kernel(devices: specs)
}

func makeCamera(_ kernel: FakeV4L2Kernel, path: String = "/dev/video0", options: V4L2Camera.Options = .init()) throws -> V4L2Camera {
    try V4L2Camera(path: path, syscalls: kernel, options: options, logger: quietLogger)
}

/// Calls `next` until it returns something other than a timeout (or `tries` timeouts).
func nextEvent(_ cam: V4L2Camera, timeoutMs: UInt64 = 50, tries: Int = 20) throws -> SourceEvent {
    for _ in 0..<tries {
        let e = try cam.next(timeoutNanoseconds: timeoutMs * 1_000_000)
        if case .timeout = e { continue }
        return e
    }
    return .timeout
}

func expectFrame(_ e: SourceEvent, sourceLocation: SourceLocation = #_sourceLocation) -> Frame? {
    guard case .frame(let f) = e else {
        Issue.record("expected a frame, got \(e)", sourceLocation: sourceLocation)
        return nil
    }
    return f
}

func expectLost(_ e: SourceEvent, _ reason: DropReason, _ count: Int, sourceLocation: SourceLocation = #_sourceLocation) {
    guard case .lost(let r, let n) = e, r == reason, n == count else {
        Issue.record("expected lost(\(reason), \(count)), got \(e)", sourceLocation: sourceLocation)
        return
    }
}

/// Encodes a horizontal luma ramp (and flat chroma) as a JPEG with TurboJPEG.
func makeJPEG(width: Int, height: Int, subsampling: TJSAMP = TJSAMP_422, quality: Int32 = 90) -> [UInt8] {
    let h = tjInitCompress()!
    defer { tjDestroy(h) }
    var rgb = [UInt8](repeating: 0, count: width * height * 3)
    for y in 0..<height {
        for x in 0..<width {
            let v = UInt8(x * 255 / max(width - 1, 1))
            rgb[(y * width + x) * 3] = v
            rgb[(y * width + x) * 3 + 1] = v
            rgb[(y * width + x) * 3 + 2] = v
        }
    }
    var out: UnsafeMutablePointer<UInt8>? = nil
    var size: UInt = 0
    let r = tjCompress2(h, rgb, Int32(width), 0, Int32(height), Int32(TJPF_RGB.rawValue), &out, &size, Int32(subsampling.rawValue), quality, 0)
    precondition(r == 0, String(cString: tjGetErrorStr2(h)))
    defer { tjFree(out) }
    return Array(UnsafeBufferPointer(start: out, count: Int(size)))
}
