import Testing
import Viewfinder
@testable import ViewfinderStages

#if canImport(Glibc)
import Glibc
#endif

/// A deterministic random generator for test scenes.
struct TestRNG {
    var state: UInt64
    init(_ seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func uniform() -> Double { Double(next() >> 11) / Double(1 << 53) }
    mutating func gaussian() -> Double {
        let u = max(uniform(), 1e-12), v = uniform()
        return (-2 * log(u)).squareRoot() * cos(2 * .pi * v)
    }
}

/// A textured test picture (value noise over three scales), sampled bilinearly so that shifted and
/// rotated views of it are exact up to interpolation. Values are linear radiance around 1.
final class TestTexture {
    let width: Int
    let height: Int
    var values: [Float]

    init(width: Int, height: Int, seed: UInt64 = 7) {
        self.width = width
        self.height = height
        values = Array(repeating: 0, count: width * height)
        var rng = TestRNG(seed)
        for (scale, amp) in [(37, 0.5), (13, 0.3), (5, 0.2)] {
            let gw = width / scale + 2, gh = height / scale + 2
            var grid = [Double](repeating: 0, count: gw * gh)
            for i in grid.indices { grid[i] = rng.uniform() }
            for y in 0..<height {
                let gy = Double(y) / Double(scale)
                let iy = Int(gy), fy = gy - Double(iy)
                let sy = fy * fy * (3 - 2 * fy)
                for x in 0..<width {
                    let gx = Double(x) / Double(scale)
                    let ix = Int(gx), fx = gx - Double(ix)
                    let sx = fx * fx * (3 - 2 * fx)
                    let a = grid[iy * gw + ix], b = grid[iy * gw + ix + 1]
                    let c = grid[(iy + 1) * gw + ix], d = grid[(iy + 1) * gw + ix + 1]
                    let v = (a + (b - a) * sx) + ((c + (d - c) * sx) - (a + (b - a) * sx)) * sy
                    values[y * width + x] += Float(amp * v)
                }
            }
        }
        // Radiance 0.2 ... 1.8 around a mean of about 1.
        for i in values.indices { values[i] = 0.2 + 1.6 * values[i] }
    }

    @inline(__always)
    func sample(_ x: Double, _ y: Double) -> Float {
        let cx = min(max(x, 0), Double(width - 2)), cy = min(max(y, 0), Double(height - 2))
        let ix = Int(cx), iy = Int(cy)
        let fx = Float(cx - Double(ix)), fy = Float(cy - Double(iy))
        let p = iy * width + ix
        let a = values[p], b = values[p + 1], c = values[p + width], d = values[p + width + 1]
        let t = a + (b - a) * fx
        return t + ((c + (d - c) * fx) - t) * fy
    }
}

/// Writes luma `value(x, y)` into a frame of any YUV/GREY format, with neutral chroma.
func fill(_ frame: Frame, _ value: (Int, Int) -> UInt8) {
    let f = frame.format
    let base = frame.data.assumingMemoryBound(to: UInt8.self)
    let l = f.lumaLayout!
    if f.pixelFormat == .yuyv || f.pixelFormat == .uyvy {
        for y in 0..<f.height {
            for x in 0..<f.width { base[y * f.bytesPerRow + 2 * x + (1 - l.offset)] = 128 }
        }
    } else {
        for i in 1..<f.planeCount {
            let p = f.plane(i)
            (base + p.offset).initialize(repeating: 128, count: p.byteCount)
        }
    }
    for y in 0..<f.height {
        let row = base + l.offset + y * l.bytesPerRow
        for x in 0..<f.width { row[x * l.pixelStride] = value(x, y) }
    }
}

/// Renders the texture as the sim's sensor would: `Y = 255·√(min(L·k, 1))`, shifted by
/// (dx, dy) and rotated by `angle` (counter-clockwise as seen) about the centre, optionally box-blurred.
func render(_ texture: TestTexture, into frame: Frame, exposure: Double = 1, dx: Double = 0, dy: Double = 0, angle: Double = 0, blur: Int = 0, noise: Double = 0, rng: inout TestRNG) {
    let f = frame.format
    let w = f.width, h = f.height
    let cx = Double(w - 1) / 2, cy = Double(h - 1) / 2
    let ox = Double(texture.width - w) / 2, oy = Double(texture.height - h) / 2
    // Positive angle: counter-clockwise as seen (y points down, so the pixel rotation is -angle).
    let co = cos(-angle), si = sin(-angle)
    var lin = [Float](repeating: 0, count: w * h)
    for y in 0..<h {
        for x in 0..<w {
            // Content moved by (dx, dy) and rotated: sample the texture at the inverse position.
            let qx = Double(x) - cx - dx, qy = Double(y) - cy - dy
            let px = co * qx + si * qy + cx + ox, py = -si * qx + co * qy + cy + oy
            lin[y * w + x] = texture.sample(px, py)
        }
    }
    if blur > 0 { boxBlur(&lin, w, h, blur) }
    let k = Float(0.18 * exposure)
    var r = rng
    fill(frame) { x, y in
        var v = 255 * min(lin[y * w + x] * k, 1).squareRoot()
        if noise > 0 { v += Float(noise * r.gaussian()) }
        return UInt8(max(0, min(255, v.rounded())))
    }
    rng = r
}

func boxBlur(_ a: inout [Float], _ w: Int, _ h: Int, _ r: Int) {
    var t = a
    let n = Float(2 * r + 1)
    for y in 0..<h {
        for x in 0..<w {
            var s: Float = 0
            for k in -r...r { s += a[y * w + min(max(x + k, 0), w - 1)] }
            t[y * w + x] = s / n
        }
    }
    for y in 0..<h {
        for x in 0..<w {
            var s: Float = 0
            for k in -r...r { s += t[min(max(y + k, 0), h - 1) * w + x] }
            a[y * w + x] = s / n
        }
    }
}

/// A stand-in device for closed-loop tests without the sim: controls that take effect
/// `latency` frames after they are set, and a renderer using the sim's tone curve.
final class FakeControls: DeviceControlling, @unchecked Sendable {
    // @unchecked Sendable: used from one test thread only.
    var values: [String: Int64] = ["auto_exposure": 0, "exposure_time_absolute": 100, "gain": 100, "focus_absolute": 0]
    /// Values in force per future frame: pending[k] applies `k` frames from now.
    var pending: [(frames: Int, name: String, value: Int64)] = []
    var applied: [String: Int64] = [:]
    let latency: Int
    var sets = 0
    /// What the stages queue; ``nextFrame()`` writes it first, as the engine's capture thread does.
    let requests = ControlRequestQueue()

    init(latency: Int, exposure100us: Int64 = 100, gain: Int64 = 100, focus: Int64 = 0) {
        self.latency = latency
        values["exposure_time_absolute"] = exposure100us
        values["gain"] = gain
        values["focus_absolute"] = focus
        applied = values
    }

    var descriptors: [ControlDescriptor] {
        [
            ControlDescriptor(id: 1, name: "auto_exposure", kind: .menu, minimum: 0, maximum: 1, step: 1, defaultValue: 0, standard: .exposureAuto),
            ControlDescriptor(id: 2, name: "exposure_time_absolute", kind: .integer, minimum: 1, maximum: 10_000, step: 1, defaultValue: 100, standard: .exposureTime),
            ControlDescriptor(id: 3, name: "gain", kind: .integer, minimum: 100, maximum: 1600, step: 1, defaultValue: 100, standard: .gain),
            ControlDescriptor(id: 4, name: "focus_absolute", kind: .integer, minimum: 0, maximum: 1000, step: 1, defaultValue: 0, standard: .focusAbsolute),
        ]
    }
    func value(of name: String) throws -> Int64 { values[name] ?? 0 }
    func set(_ name: String, to value: Int64) throws {
        guard let d = descriptors.first(where: { $0.name == name }) else {
            throw DeviceError.unknownControl(device: "fake", control: name, known: descriptors.map(\.name))
        }
        let v = min(max(value, d.minimum), d.maximum)
        values[name] = v
        pending.append((latency, name, v))
        sets += 1
    }
    var controlLatencyFrames: Int { latency }

    /// Advances one frame: returns the values the next frame is taken with.
    func nextFrame() -> [String: Int64] {
        requests.apply(to: self, afterFrame: nil)
        var keep: [(frames: Int, name: String, value: Int64)] = []
        for p in pending {
            if p.frames - 1 <= 0 { applied[p.name] = p.value } else { keep.append((p.frames - 1, p.name, p.value)) }
        }
        pending = keep
        return applied
    }
}

func highFrequencyRMS(_ x: [Double], window: Int = 7) -> Double {
    var s = 0.0
    var n = 0
    for t in window..<(x.count - window) {
        var m = 0.0
        for k in (t - window)...(t + window) { m += x[k] }
        m /= Double(2 * window + 1)
        s += (x[t] - m) * (x[t] - m)
        n += 1
    }
    return (s / Double(max(n, 1))).squareRoot()
}
