import Viewfinder
/// Options of the simulated camera, parsed from its device string
/// `sim:key=value,key=value,...` (`sim` alone takes every default).
///
/// | option | meaning | unit / values | default |
/// |---|---|---|---|
/// | `width`, `height` | output size; any even size from 64x64 to 7680x4320 (discover() lists 640x480, 1280x720, 1920x1080, 3840x2160) | pixels | 1280x720 |
/// | `fps` | frame rate; also sets the frame interval that caps the exposure time | frames/s, (0, 240] | 30 |
/// | `format` | `yuyv`, `uyvy`, `nv12`, `i420`, `yuv422p`, `grey`, `mjpeg` | | yuyv |
/// | `quality` | JPEG quality for `mjpeg` | 1...100 | 85 |
/// | `scene` | image file to film (JPEG, or binary PPM/PGM); empty: the built-in procedural scene | path | procedural |
/// | `shake` | hand-shake amplitude (RMS translation per axis); rotation RMS is `shake` x 0.0004 rad | pixels, 0...64 | 0 |
/// | `flicker` | mains frequency of the lighting: 0 (steady light), 50 or 60; light is modulated at twice this frequency | Hz | 0 |
/// | `flicker_depth` | modulation depth of the flickering light (0.4 = ±40 %) | 0...1 | 0.4 |
/// | `latency` | frames between a control `set` and the first frame it affects: after frame k was delivered, frame k+latency is the first rendered with the new value (1 = the next frame) | frames, 1...30 | 2 |
/// | `paced` | `true`: real time at `fps`, a live source (late frames are skipped and reported as `driver_gap`); `false`: as fast as possible, a non-live source | bool | true |
/// | `seed` | seed of the shake path, the noise and the procedural scene | integer | 1 |
/// | `frames` | end the stream after this many sensor frames (delivered or lost); 0 = never | frames | 0 |
/// | `noise` | scale of the sensor noise (shot and read noise); 0 = noiseless | 0...10 | 1 |
/// | `subject` | distance of the (flat) scene from the lens; sets the in-focus lens position `1000 x 0.2 m / subject` | metres, 0.2...1000 | 0.5 (in focus at 400) |
/// | `light` | scene illumination relative to the reference; at 1 the procedural view averages about 1.25x an 18 % grey card (bright sky), so 10 ms at unity gain gives mean luma about 115 | factor, 0.001...1000 | 1 |
/// | `exposure` | initial exposure time (control `exposure_time_absolute`, rounded to 100 µs) | milliseconds | 10 |
/// | `gain` | initial analogue gain (control `gain` = 100 x this) | factor, 1...16 | 1 |
/// | `focus` | initial lens position (control `focus_absolute`) | 0...1000 | 400 |
/// | `gamma` | tone curve: output luma = 255 x (linear signal / full scale)^(1/gamma), a pure power law so that luma scales exactly by 2^(1/gamma) per EV until clipping | 1...3 | 2.2 |
/// | `buffers` | frames in the sim's pool | 2...64 | 8 |
/// | `colortemp` | colour temperature of the scene's light (white balance reference) | kelvin, 2000...10000 | 5200 |
public struct SimOptions: Sendable, Equatable {
    public var width = 1280
    public var height = 720
    public var fps = 30.0
    public var format = PixelFormat.yuyv
    public var quality = 85
    public var scene: String? = nil
    public var shake = 0.0
    public var flicker = 0
    public var flickerDepth = 0.4
    public var latency = 2
    public var paced = true
    public var seed: UInt64 = 1
    public var frames: UInt64 = 0
    public var noise = 1.0
    public var subject = 0.5
    public var light = 1.0
    public var exposureMs = 10.0
    public var gain = 1.0
    public var focus = 400.0
    public var gamma = 2.2
    public var buffers = 8
    public var colorTemperature = 5200.0

    public init() {}

    /// Option names, in documentation order.
    public static let names = ["width", "height", "fps", "format", "quality", "scene", "shake", "flicker", "flicker_depth", "latency", "paced", "seed", "frames", "noise", "subject", "light", "exposure", "gain", "focus", "gamma", "buffers", "colortemp"]

    /// Formats the sim renders.
    public static let formats: [PixelFormat] = [.yuyv, .uyvy, .nv12, .i420, .yuv422p, .grey, .mjpeg]

    /// The lens position at which a subject at `distance` metres is sharp (0...1000).
    public static func inFocusPosition(subjectDistance distance: Double) -> Double {
        min(1000, max(0, 1000 * 0.2 / distance))
    }

    /// Parses a device string `sim` or `sim:key=value,...`. Throws
    /// ``DeviceError/invalidDeviceOption(device:option:reason:)`` naming the bad option.
    public init(deviceString s: String) throws {
        self.init()
        let body: Substring
        if s == "sim" { body = "" }
        else if s.hasPrefix("sim:") { body = s.dropFirst(4) }
        else { throw DeviceError.unknownDevice(s, reason: "the sim camera's device string starts with 'sim'") }
        var seen = Set<String>()
        for item in body.split(separator: ",", omittingEmptySubsequences: true) {
            let kv = item.split(separator: "=", maxSplits: 1).map(String.init)
            guard kv.count == 2, !kv[0].isEmpty else {
                throw DeviceError.invalidDeviceOption(device: s, option: String(item), reason: "expected key=value")
            }
            let k = kv[0].lowercased(), v = kv[1]
            guard !seen.contains(k) else { throw DeviceError.invalidDeviceOption(device: s, option: k, reason: "given twice") }
            seen.insert(k)
            func bad(_ why: String) -> DeviceError { .invalidDeviceOption(device: s, option: k, reason: "\(why), got '\(v)'") }
            func int(_ r: ClosedRange<Int>) throws -> Int {
                guard let i = Int(v), r.contains(i) else { throw bad("expected an integer in \(r.lowerBound)...\(r.upperBound)") }
                return i
            }
            func dbl(_ r: ClosedRange<Double>) throws -> Double {
                guard let d = Double(v), d.isFinite, r.contains(d) else { throw bad("expected a number in \(r.lowerBound)...\(r.upperBound)") }
                return d
            }
            switch k {
            case "width": width = try int(64...7680); if width % 2 != 0 { throw bad("expected an even width") }
            case "height": height = try int(64...4320); if height % 2 != 0 { throw bad("expected an even height") }
            case "fps": fps = try dbl(0.1...240)
            case "format":
                guard let f = PixelFormat(name: v), SimOptions.formats.contains(f) else {
                    throw bad("expected one of \(SimOptions.formats.map(\.rawValue).joined(separator: ", "))")
                }
                format = f
            case "quality": quality = try int(1...100)
            case "scene": scene = v.isEmpty ? nil : v
            case "shake": shake = try dbl(0...64)
            case "flicker":
                guard let i = Int(v), [0, 50, 60].contains(i) else { throw bad("expected 0, 50 or 60 (Hz)") }
                flicker = i
            case "flicker_depth": flickerDepth = try dbl(0...1)
            case "latency": latency = try int(1...30)
            case "paced":
                guard let b = Bool(v.lowercased()) else { throw bad("expected true or false") }
                paced = b
            case "seed":
                guard let u = UInt64(v) else { throw bad("expected a non-negative integer") }
                seed = u
            case "frames":
                guard let u = UInt64(v) else { throw bad("expected a non-negative integer") }
                frames = u
            case "noise": noise = try dbl(0...10)
            case "subject": subject = try dbl(0.2...1000)
            case "light": light = try dbl(0.001...1000)
            case "exposure": exposureMs = try dbl(0.1...1000)
            case "gain": gain = try dbl(1...16)
            case "focus": focus = try dbl(0...1000)
            case "gamma": gamma = try dbl(1...3)
            case "buffers": buffers = try int(2...64)
            case "colortemp": colorTemperature = try dbl(2000...10000)
            default:
                throw DeviceError.invalidDeviceOption(device: s, option: k, reason: "unknown option (known: \(SimOptions.names.joined(separator: ", ")))")
            }
        }
    }
}
