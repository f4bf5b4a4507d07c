// Stabilisation judged on real photographs with synthetic hand-shake, side by side with FFmpeg's
// vidstab (two passes) and deshake on the same input, on one core.
//
//   cd Benchmarks && swift run -c release viewfinder-report --stabilise [--quick]
//
// Input: the sim camera filming a photograph (CC-BY/CC-BY-SA wallpapers from Debian's
// lomiri-wallpapers-16.04, fetched with `apt-get download`, never committed) with its band-limited
// hand-shake (0.3–6 Hz, 1/f amplitudes, rotation included), written as 1080p YUV4MPEG2.
// Every output is measured the same way, by a dense registration written here for the purpose
// (Gauss–Newton on a similarity over the central 76 % of the picture, coarse-to-fine from an
// exhaustive search) — not the stage's own block-based estimator — so no stabiliser is judged by
// its own yardstick. Jitter is what a ±7-frame moving average of the path does not follow.
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import StageTiming
import ViewfinderKit

/// A grey image in Float for registration.
final class RegImage {
    let w: Int, h: Int
    var p: [Float]
    init(w: Int, h: Int) { self.w = w; self.h = h; p = [Float](repeating: 0, count: w * h) }

    /// Luma at half resolution (2×2 box).
    convenience init(luma: LumaView) {
        self.init(w: luma.width / 2, h: luma.height / 2)
        for y in 0..<h {
            let r0 = luma.pointer(x: 0, y: 2 * y), r1 = r0 + luma.bytesPerRow
            let s = luma.pixelStride
            for x in 0..<w {
                let k = 2 * x * s
                p[y * w + x] = (Float(r0[k]) + Float(r0[k + s]) + Float(r1[k]) + Float(r1[k + s])) * 0.25
            }
        }
    }

    /// Binomial [1 2 1]/4 smoothing in both directions (less aliasing, less bilinear bias).
    func smoothed() -> RegImage {
        let t = RegImage(w: w, h: h), o = RegImage(w: w, h: h)
        for y in 0..<h { for x in 1..<(w - 1) { t.p[y * w + x] = 0.25 * (p[y * w + x - 1] + 2 * p[y * w + x] + p[y * w + x + 1]) }
            t.p[y * w] = p[y * w]; t.p[y * w + w - 1] = p[y * w + w - 1] }
        for y in 1..<(h - 1) { for x in 0..<w { o.p[y * w + x] = 0.25 * (t.p[(y - 1) * w + x] + 2 * t.p[y * w + x] + t.p[(y + 1) * w + x]) } }
        for x in 0..<w { o.p[x] = t.p[x]; o.p[(h - 1) * w + x] = t.p[(h - 1) * w + x] }
        return o
    }

    func halved() -> RegImage {
        let o = RegImage(w: w / 2, h: h / 2)
        for y in 0..<o.h { for x in 0..<o.w {
            let i = 2 * y * w + 2 * x
            o.p[y * o.w + x] = (p[i] + p[i + 1] + p[i + w] + p[i + w + 1]) * 0.25
        } }
        return o
    }

    /// Bilinear sample and gradient at (x, y), clamped to the image.
    @inline(__always)
    func sample(_ x: Float, _ y: Float) -> (v: Float, gx: Float, gy: Float) {
        let cx = min(max(x, 1), Float(w - 3)), cy = min(max(y, 1), Float(h - 3))
        let ix = Int(cx), iy = Int(cy)
        let fx = cx - Float(ix), fy = cy - Float(iy)
        let i = iy * w + ix
        let a = p[i], b = p[i + 1], c = p[i + w], d = p[i + w + 1]
        let v = a + (b - a) * fx + (c - a) * fy + (a - b - c + d) * fx * fy
        let gx = (b - a) + (a - b - c + d) * fy
        let gy = (c - a) + (a - b - c + d) * fx
        return (v, gx, gy)
    }
}

/// A similarity from frame b's pixel positions to frame a's: a(c + s·R(θ)(x − c) + t) ≈ b(x).
struct Sim4 { var tx = 0.0, ty = 0.0, theta = 0.0, s = 1.0 }

enum Registration {
    /// The similarity taking `b` onto `a` (both half-resolution luma), coarse to fine. The
    /// translation is returned in full-resolution pixels.
    static func register(_ a: RegImage, _ b: RegImage) -> Sim4 {
        var pa = [a.smoothed()], pb = [b.smoothed()]
        while pa.last!.w > 200 { pa.append(pa.last!.halved()); pb.append(pb.last!.halved()) }
        // Exhaustive integer search at the coarsest level.
        let A = pa.last!, B = pb.last!
        var best = Float.infinity, bx = 0, by = 0
        let mx = A.w / 6, my = A.h / 6, r = 8
        for dy in -r...r { for dx in -r...r {
            var sad: Float = 0
            for y in stride(from: my, to: A.h - my, by: 1) {
                for x in stride(from: mx, to: A.w - mx, by: 1) {
                    sad += abs(A.p[(y + dy) * A.w + x + dx] - B.p[y * B.w + x])
                }
            }
            if sad < best { best = sad; bx = dx; by = dy }
        } }
        var m = Sim4(tx: Double(bx), ty: Double(by))
        for level in stride(from: pa.count - 1, through: 0, by: -1) {
            if level < pa.count - 1 { m.tx *= 2; m.ty *= 2 }
            m = refine(pa[level], pb[level], m, iterations: level == 0 ? 6 : 10)
        }
        m.tx *= 2; m.ty *= 2 // half resolution → full
        return m
    }

    /// Gauss–Newton on (tx, ty, θ, s) over the central 76 % of the picture.
    static func refine(_ a: RegImage, _ b: RegImage, _ start: Sim4, iterations: Int) -> Sim4 {
        var m = start
        let cx = Float(a.w - 1) / 2, cy = Float(a.h - 1) / 2
        let x0 = a.w * 12 / 100, x1 = a.w - x0, y0 = a.h * 12 / 100, y1 = a.h - y0
        for _ in 0..<iterations {
            var H = [Double](repeating: 0, count: 16), g = [Double](repeating: 0, count: 4)
            let co = Float(cos(m.theta)), si = Float(sin(m.theta)), s = Float(m.s), tx = Float(m.tx), ty = Float(m.ty)
            for y in y0..<y1 {
                var hr = [Float](repeating: 0, count: 10), gr = [Float](repeating: 0, count: 4)
                let uy = Float(y) - cy
                for x in x0..<x1 {
                    let ux = Float(x) - cx
                    let rx = co * ux - si * uy, ry = si * ux + co * uy
                    let (v, ax, ay) = a.sample(cx + s * rx + tx, cy + s * ry + ty)
                    let i = y * b.w + x
                    let e = v - b.p[i]
                    // ESM: the mean of the warped image's and the template's gradients.
                    let gx = 0.5 * (ax + 0.5 * (b.p[i + 1] - b.p[i - 1])), gy = 0.5 * (ay + 0.5 * (b.p[i + b.w] - b.p[i - b.w]))
                    // dW/dθ = s·(−ry, rx); dW/ds = (rx, ry)
                    let j0 = gx, j1 = gy, j2 = s * (-gx * ry + gy * rx), j3 = gx * rx + gy * ry
                    hr[0] += j0 * j0; hr[1] += j0 * j1; hr[2] += j0 * j2; hr[3] += j0 * j3
                    hr[4] += j1 * j1; hr[5] += j1 * j2; hr[6] += j1 * j3
                    hr[7] += j2 * j2; hr[8] += j2 * j3; hr[9] += j3 * j3
                    gr[0] += j0 * e; gr[1] += j1 * e; gr[2] += j2 * e; gr[3] += j3 * e
                }
                let idx = [(0, 0), (0, 1), (0, 2), (0, 3), (1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (3, 3)]
                for (k, (i, j)) in idx.enumerated() { H[i * 4 + j] += Double(hr[k]); if i != j { H[j * 4 + i] += Double(hr[k]) } }
                for i in 0..<4 { g[i] += Double(gr[i]) }
            }
            guard let d = solve4(H, g.map { -$0 }) else { break }
            m.tx += d[0]; m.ty += d[1]; m.theta += d[2]; m.s += d[3]
            if abs(d[0]) + abs(d[1]) < 1e-3 && abs(d[2]) < 1e-6 && abs(d[3]) < 1e-6 { break }
        }
        return m
    }

    static func solve4(_ H: [Double], _ g: [Double]) -> [Double]? {
        var a = H, b = g
        for c in 0..<4 {
            var piv = c
            for r in (c + 1)..<4 where abs(a[r * 4 + c]) > abs(a[piv * 4 + c]) { piv = r }
            guard abs(a[piv * 4 + c]) > 1e-12 else { return nil }
            if piv != c { for k in 0..<4 { a.swapAt(c * 4 + k, piv * 4 + k) }; b.swapAt(c, piv) }
            for r in 0..<4 where r != c {
                let f = a[r * 4 + c] / a[c * 4 + c]
                for k in 0..<4 { a[r * 4 + k] -= f * a[c * 4 + k] }
                b[r] -= f * b[c]
            }
        }
        return (0..<4).map { b[$0] / a[$0 * 4 + $0] }
    }
}

/// RMS of what a ±`window` moving average of `x` does not follow.
func highFrequencyRMS(_ x: [Double], window: Int = 7) -> Double {
    var s = 0.0, n = 0
    guard x.count > 2 * window else { return 0 }
    for t in window..<(x.count - window) {
        let m = x[(t - window)...(t + window)].reduce(0, +) / Double(2 * window + 1)
        s += (x[t] - m) * (x[t] - m); n += 1
    }
    return (s / Double(max(n, 1))).squareRoot()
}

/// What a sequence's measurement gives: translation and rotation jitter, black-border pixels,
/// and the picture kept relative to the input.
struct JitterReport {
    var translation: Double
    var rotation: Double
    var borderFraction: Double
    var kept: Double
    var frames: Int
}

/// Reads a Y4M file's frames' half-resolution luma.
func readLumas(_ path: String) throws -> [RegImage] {
    let r = try Y4MReader(path: path)
    let pool = r.makePool(count: 2)
    var out: [RegImage] = []
    while let lease = pool.lease() {
        guard try r.read(into: lease.frame), let l = LumaView(lease.frame) else { break }
        out.append(RegImage(luma: l))
    }
    return out
}

/// Measures a sequence: the path from consecutive registrations, its jitter; the zoom against the
/// input at every 10th frame; the share of near-black pixels in the outer 2 % ring.
func measure(_ seq: [RegImage], input: [RegImage]) -> JitterReport {
    var px = [0.0], py = [0.0], pa = [0.0]
    for t in 1..<seq.count {
        let m = Registration.register(seq[t - 1], seq[t])
        // Content motion is the negated translation of b → a (to first order).
        px.append(px.last! - m.tx); py.append(py.last! - m.ty); pa.append(pa.last! - m.theta)
    }
    var zooms: [Double] = []
    if seq.count == input.count {
        for t in stride(from: 20, to: seq.count - 20, by: 10) {
            // input(c + s·R·(x − c) + t) ≈ output(x): the output shows the input zoomed by 1/s.
            zooms.append(1 / Registration.register(input[t], seq[t]).s)
        }
    }
    var dark = 0, total = 0
    for img in seq {
        let bw = max(2, img.w / 50), bh = max(2, img.h / 50)
        for y in 0..<img.h { for x in 0..<img.w where y < bh || y >= img.h - bh || x < bw || x >= img.w - bw {
            total += 1
            if img.p[y * img.w + x] < 20 { dark += 1 }
        } }
    }
    zooms.sort()
    let zoom = zooms.isEmpty ? 1 : zooms[zooms.count / 2]
    return JitterReport(translation: (highFrequencyRMS(px) + highFrequencyRMS(py)) / 2, rotation: highFrequencyRMS(pa),
                        borderFraction: Double(dark) / Double(max(total, 1)), kept: 1 / zoom, frames: seq.count)
}

/// Fetches the photographs (Debian's lomiri-wallpapers-16.04) into a cache folder; nil if apt can't.
func fetchPhotos() -> [String]? {
    let names = ["Bridge_by_Sander_Klootwijk.jpg", "aitzgorri_by_Aitzol_Berasategi.jpg", "Dragonfly_by_Bolly.jpg"]
    let photos = debianPhotos(package: "lomiri-wallpapers-16.04", under: "x/usr/share/backgrounds", names: names) { $0 }
    guard photos.count == names.count else {
        print("  photographs not fetched (lomiri-wallpapers-16.04: \(photos.count) of \(names.count) found)")
        return nil
    }
    return photos.map(\.path)
}

/// Films `photo` with the sim camera's hand-shake into a 1080p I420 Y4M; returns the true shake.
func makeShakenSequence(photo: String, frames: Int, shake: Double, seed: Int, to path: String) throws -> (x: [Double], y: [Double], a: [Double]) {
    let sim = try SimCamera(deviceString: "sim:scene=\(photo),shake=\(shake),seed=\(seed),paced=false,frames=\(frames),width=1920,height=1080,format=i420")
    let cfg = try sim.configure(StreamRequest(pixelFormat: .i420, width: 1920, height: 1080, fps: 30, bufferCount: 4))
    let w = try Y4MWriter(path: path, format: cfg.format, interval: cfg.interval)
    try sim.start()
    defer { sim.stop(); w.close() }
    var tx: [Double] = [], ty: [Double] = [], ta: [Double] = []
    loop: while true {
        switch try sim.nextSample(timeoutNanoseconds: 5_000_000_000) {
        case .sample(let s):
            let f = s.frame
            try w.write(f)
            let t = f.metadata.truth ?? SimulationTruth()
            tx.append(t.shakeX); ty.append(t.shakeY); ta.append(t.shakeAngle)
        case .endOfStream: break loop
        case .timeout, .lost: continue
        }
    }
    try w.flush()
    return (tx, ty, ta)
}

/// Runs the stabilise stage over a Y4M file on this thread; returns the median stage CPU time per
/// frame (ms).
func runOurStabiliser(input: String, output: String, copyFrames: StabiliseOptions.CopyPolicy, lookahead: Int = 15, corrections: inout [MotionEstimate]) throws -> Double {
    let r = try Y4MReader(path: input)
    let w = try Y4MWriter(path: output, format: r.format, interval: r.header.interval)
    defer { w.close() }
    var o = StabiliseOptions()
    o.lookahead = lookahead
    o.copyFrames = copyFrames
    // VF_STAB_KEEP=0.86: the part of the picture kept (the stage's `keep`; 0.9 by default).
    if let k = ProcessInfo.processInfo.environment["VF_STAB_KEEP"].flatMap(Double.init) { o.keep = k }
    let st = StabiliseStage(options: o)
    // The stage in a chain of its own, as the engine runs it: frames that come out are kept as
    // sample buffers and written after the timed part.
    let chain = StageChain(stages: [st], drops: DropCounters())
    var ready: [SampleBuffer] = []
    try chain.prepare(format: r.format, context: StageContext(format: r.format, frameIntervalNanoseconds: 33_333_333, isLive: false, sourceBuffers: 64, buffersNeeded: 40)) { f in
        if let b = SampleBuffer(retaining: f) { ready.append(b) }
    }
    let pool = r.makePool(count: 48)
    var times: [Double] = []
    func drain() throws {
        for b in ready { corrections.append(b.metadata.correction ?? MotionEstimate()); try w.write(b.frame) }
        ready.removeAll()
    }
    while let lease = pool.lease() {
        guard try r.read(into: lease.frame) else { break }
        let t0 = StageBenchmarks.threadCPUNanoseconds()
        chain.submit(lease.frame)
        times.append(Double(StageBenchmarks.threadCPUNanoseconds() - t0) / 1e6)
        try drain()
    }
    chain.finish()
    try drain()
    try w.flush()
    times.sort()
    return times[times.count / 2]
}

/// Seconds a shell command takes, pinned to one core.
func timed(_ cmd: String) -> (Double, Bool) {
    let t0 = monotonicNanoseconds()
    let (c, out) = shell("taskset -c 0 \(cmd)")
    if c != 0 { print("  command failed (\(c)): \(cmd)\n  \(out.suffix(300))") }
    return (Double(monotonicNanoseconds() - t0) / 1e9, c == 0)
}

func runStabiliseComparison(quick: Bool) throws {
    print("\n== Stabilisation on real photographs with synthetic hand-shake, 1920x1080, one core (vs FFmpeg on the same input)")
    guard shell("ffmpeg -hide_banner -filters 2>/dev/null | grep -c vidstab").1.trimmingCharacters(in: .whitespacesAndNewlines) != "0" else {
        print("  ffmpeg with vidstab not found: comparison not run"); return
    }
    guard let photos = fetchPhotos() else { return }
    let frames = quick ? 90 : 240
    let dir = "/tmp/viewfinder-stab"
    _ = shell("mkdir -p \(dir)")
    var rows: [(String, [Double])] = []
    for (i, photo) in (quick ? Array(photos.prefix(1)) : photos).enumerated() {
        let name = URL(fileURLWithPath: photo).lastPathComponent.components(separatedBy: "_by_").first ?? "photo"
        let input = "\(dir)/in-\(i).y4m"
        let truth = try makeShakenSequence(photo: photo, frames: frames, shake: 5, seed: 11 + i, to: input)
        // Ours.
        let ours = "\(dir)/ours-\(i).y4m"
        var corr: [MotionEstimate] = []
        let ourMs = try runOurStabiliser(input: input, output: ours, copyFrames: .never, corrections: &corr)
        if corr.count == truth.x.count {
            let rx = zip(truth.x, corr).map { $0 + $1.dx }, ry = zip(truth.y, corr).map { $0 + $1.dy }
            let byMeta = (highFrequencyRMS(rx) + highFrequencyRMS(ry)) / (highFrequencyRMS(truth.x) + highFrequencyRMS(truth.y))
            print(String(format: "  (stage's own books: true shake + applied correction leaves %.1f %%)", byMeta * 100))
        }
        // FFmpeg: vidstab two-pass (smoothing 15 = the same ±15-frame window, optimal static zoom,
        // no borders) and deshake (defaults), one thread, pinned; decode/encode cost subtracted.
        let peers = !CommandLine.arguments.contains("--no-peers")
        let ff = "ffmpeg -hide_banner -loglevel error -y -threads 1 -filter_threads 1 -i \(input)"
        let skip = (0.0, false)
        let (base, _) = peers ? timed("\(ff) -vf null -f yuv4mpegpipe \(dir)/null.y4m") : skip
        let (baseNull, _) = peers ? timed("\(ff) -vf null -f null -") : skip
        let (detect, ok1) = peers ? timed("\(ff) -vf vidstabdetect=shakiness=5:accuracy=15:result=\(dir)/t\(i).trf -f null -") : skip
        let (transform, ok2) = peers ? timed("\(ff) -vf vidstabtransform=input=\(dir)/t\(i).trf:smoothing=15:optzoom=1:crop=black -f yuv4mpegpipe \(dir)/vidstab-\(i).y4m") : skip
        let (deshake, ok3) = peers ? timed("\(ff) -vf deshake -f yuv4mpegpipe \(dir)/deshake-\(i).y4m") : skip
        let vidstabMs = ((detect - baseNull) + (transform - base)) / Double(frames) * 1000
        let deshakeMs = (deshake - base) / Double(frames) * 1000
        // Measure everything the same way.
        let inL = try readLumas(input)
        let mIn = measure(inL, input: inL)
        let truthHF = (highFrequencyRMS(truth.x) + highFrequencyRMS(truth.y)) / 2
        print("  \(name): input jitter measured \(String(format: "%.2f", mIn.translation)) px (truth \(String(format: "%.2f", truthHF)) px), rotation \(String(format: "%.5f", mIn.rotation)) rad")
        var results: [(String, JitterReport, Double)] = []
        results.append(("Viewfinder stabilise (look-ahead 15)", measure(try readLumas(ours), input: inL), ourMs))
        if ok1 && ok2 { results.append(("FFmpeg vidstab, two passes (smoothing 15)", measure(try readLumas("\(dir)/vidstab-\(i).y4m"), input: inL), vidstabMs)) }
        if ok3 { results.append(("FFmpeg deshake", measure(try readLumas("\(dir)/deshake-\(i).y4m"), input: inL), deshakeMs)) }
        for (label, m, ms) in results {
            let tr = m.translation / mIn.translation * 100, rot = m.rotation / max(mIn.rotation, 1e-9) * 100
            row("    \(label)", String(format: "%.1f %% jitter left", tr),
                String(format: "rotation %.0f %%, kept %.1f %%, border px %.2f %% (input %.2f %%), %.2f ms/frame", rot, m.kept * 100, m.borderFraction * 100, mIn.borderFraction * 100, ms))
            rows.append((label, [tr, ms, m.kept]))
        }
    }
    // Means over the photographs.
    var labels: [String] = []
    for (l, _) in rows where !labels.contains(l) { labels.append(l) }
    print("  mean over \(rows.count / max(labels.count, 1)) photographs:")
    for l in labels {
        let v = rows.filter { $0.0 == l }.map(\.1)
        let n = Double(v.count)
        row("    \(l)", String(format: "%.1f %% jitter left", v.map { $0[0] }.reduce(0, +) / n),
            String(format: "%.2f ms/frame, kept %.1f %%", v.map { $0[1] }.reduce(0, +) / n, v.map { $0[2] }.reduce(0, +) / n * 100))
    }
}

func diagnoseEstimator(_ photo: String) throws {
    let sim = try SimCamera(deviceString: "sim:scene=\(photo),shake=5,seed=11,paced=false,frames=60,width=1920,height=1080,format=i420")
    _ = try sim.configure(StreamRequest(pixelFormat: .i420, width: 1920, height: 1080, fps: 30, bufferCount: 4))
    try sim.start()
    defer { sim.stop() }
    let est = MotionEstimator(width: 1920, height: 1080)
    var prev: RegImage?
    var pt = SimulationTruth()
    var n = 0, se = 0.0, sd = 0.0
    loop: while true {
        switch try sim.nextSample(timeoutNanoseconds: 5_000_000_000) {
        case .sample(let s):
            let f = s.frame
            let l = LumaView(f)!
            let m = est.estimate(l)
            let img = RegImage(luma: l)
            let t = f.metadata.truth!
            if let p = prev {
                let g = Registration.register(p, img)
                let tx = t.shakeX - pt.shakeX, ty = t.shakeY - pt.shakeY
                se += (m.dx - tx) * (m.dx - tx) + (m.dy - ty) * (m.dy - ty); sd += (-g.tx - tx) * (-g.tx - tx) + (-g.ty - ty) * (-g.ty - ty)
                print(String(format: "%3d truth %7.3f %7.3f %8.5f | est %7.3f %7.3f %8.5f c %.2f | dense %7.3f %7.3f %8.5f", n, tx, ty, t.shakeAngle - pt.shakeAngle, m.dx, m.dy, m.angle, m.confidence, -g.tx, -g.ty, -g.theta))
            }
            prev = img; pt = t
            n += 1
        case .endOfStream: break loop
        default: continue
        }
    }
    print(String(format: "RMS error per axis: estimator %.3f px, dense %.3f px", (se / Double(2 * (n - 1))).squareRoot(), (sd / Double(2 * (n - 1))).squareRoot()))
}

/// The stage on the sim filming `photo`, from the frames' own metadata: estimator error and
/// residual, per axis, high-frequency part.
func diagnoseStage(_ photo: String, frames: Int, shake: Double, lookahead: Int) throws {
    let sim = try SimCamera(deviceString: "sim:scene=\(photo),shake=\(shake),seed=11,paced=false,frames=\(frames),width=1920,height=1080,format=i420")
    let cfg = try sim.configure(StreamRequest(pixelFormat: .i420, width: 1920, height: 1080, fps: 30, bufferCount: 64))
    var o = StabiliseOptions()
    o.lookahead = lookahead
    let st = StabiliseStage(options: o)
    let chain = StageChain(stages: [st], drops: DropCounters())
    var out: [SampleBuffer] = []
    try chain.prepare(format: cfg.format, context: StageContext(format: cfg.format, frameIntervalNanoseconds: 33_333_333, isLive: false)) { f in
        if let b = SampleBuffer(retaining: f) { out.append(b) }
    }
    try sim.start()
    defer { sim.stop() }
    var tx: [Double] = [], ty: [Double] = [], ex: [Double] = [], ey: [Double] = [], cx: [Double] = [], cy: [Double] = [], ta: [Double] = [], ea: [Double] = [], ca: [Double] = []
    func take(_ f: Frame) {
        let t = f.metadata.truth!, m = f.metadata.motion!, c = f.metadata.correction!
        tx.append(t.shakeX); ty.append(t.shakeY); ta.append(t.shakeAngle)
        ex.append((ex.last ?? 0) + (ex.isEmpty ? 0 : m.dx)); ey.append((ey.last ?? 0) + (ey.isEmpty ? 0 : m.dy)); ea.append((ea.last ?? 0) + (ea.isEmpty ? 0 : m.angle))
        cx.append(c.dx); cy.append(c.dy); ca.append(c.angle)
    }
    loop: while true {
        switch try sim.nextSample(timeoutNanoseconds: 5_000_000_000) {
        case .sample(let s):
            chain.submit(s.frame)
            for b in out { take(b.frame) }
            out.removeAll()
        case .endOfStream: break loop
        default: continue
        }
    }
    chain.finish()
    for b in out { take(b.frame) }
    let hf = { (a: [Double]) in highFrequencyRMS(a) }
    print(String(format: "truth HF x %.3f y %.3f a %.5f", hf(tx), hf(ty), hf(ta)))
    print(String(format: "estimator error HF x %.3f y %.3f a %.5f", hf(zip(tx, ex).map { $0 - $1 }), hf(zip(ty, ey).map { $0 - $1 }), hf(zip(ta, ea).map { $0 - $1 })))
    print(String(format: "residual (truth + correction) HF x %.3f y %.3f a %.5f", hf(zip(tx, cx).map { $0 + $1 }), hf(zip(ty, cy).map { $0 + $1 }), hf(zip(ta, ca).map { $0 + $1 })))
    print(String(format: "estimated path + correction HF x %.3f y %.3f", hf(zip(ex, cx).map { $0 + $1 }), hf(zip(ey, cy).map { $0 + $1 })))
    for t in stride(from: 0, to: tx.count, by: max(1, tx.count / 25)) {
        print(String(format: "%3d truth %7.2f est %7.2f corr %7.2f | y truth %7.2f est %7.2f corr %7.2f", t, tx[t] - tx[0], ex[t], cx[t], ty[t] - ty[0], ey[t], cy[t]))
    }
}
