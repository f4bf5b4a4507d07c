import Testing
import Foundation
import CTurboJPEG
@testable import Viewfinder
@testable import ViewfinderSim

/// Helpers: open a sim camera, pull frames synchronously (as the capture thread would).
enum SimTest {
    /// A small grey JPEG (TurboJPEG).
    static func grayJPEG(width: Int, height: Int) -> [UInt8] {
        let h = tjInitCompress()!
        defer { tjDestroy(h) }
        let rgb = [UInt8](repeating: 128, count: width * height * 3)
        var out: UnsafeMutablePointer<UInt8>? = nil
        var size: UInt = 0
        let r = tjCompress2(h, rgb, Int32(width), 0, Int32(height), Int32(TJPF_RGB.rawValue), &out, &size, Int32(TJSAMP_420.rawValue), 90, 0)
        precondition(r == 0, String(cString: tjGetErrorStr2(h)))
        defer { tjFree(out) }
        return Array(UnsafeBufferPointer(start: out, count: Int(size)))
    }

    static func open(_ s: String) throws -> SimCamera {
        let cam = try SimCamera(deviceString: s)
        try cam.start()
        return cam
    }

    /// The next frame; fails the test on anything else.
    static func frame(_ cam: SimCamera) throws -> Frame {
        for _ in 0..<50 {
            switch try cam.next(timeoutNanoseconds: 2_000_000_000) {
            case .frame(let f): return f
            case .timeout: continue
            case .lost(let r, let n): Issue.record("unexpected loss \(r) x\(n)")
            case .endOfStream: Issue.record("unexpected end of stream")
            }
        }
        throw DeviceError.notRunning(device: "sim")
    }

    /// Luma samples of a frame as doubles (any uncompressed format).
    static func luma(_ f: Frame) -> (w: Int, h: Int, px: [Double]) {
        let l = f.format.lumaLayout!
        var px = [Double](repeating: 0, count: f.format.width * f.format.height)
        for y in 0..<f.format.height {
            for x in 0..<f.format.width {
                px[y * f.format.width + x] = Double(f.data.load(fromByteOffset: l.offset + y * l.bytesPerRow + x * l.pixelStride, as: UInt8.self))
            }
        }
        return (f.format.width, f.format.height, px)
    }

    static func mean(_ a: [Double]) -> Double { a.reduce(0, +) / Double(a.count) }

    /// Variance of the 4-neighbour Laplacian over the interior.
    static func laplacianVariance(_ f: Frame) -> Double {
        let (w, h, p) = luma(f)
        var vals: [Double] = []
        vals.reserveCapacity(w * h)
        for y in 1..<(h - 1) {
            for x in 1..<(w - 1) {
                let i = y * w + x
                vals.append(4 * p[i] - p[i - 1] - p[i + 1] - p[i - w] - p[i + w])
            }
        }
        let m = mean(vals)
        return vals.reduce(0) { $0 + ($1 - m) * ($1 - m) } / Double(vals.count)
    }
}

@Suite struct SimOptionsTests {
    @Test func parsesEveryOption() throws {
        let o = try SimOptions(deviceString: "sim:width=1920,height=1080,fps=60,format=nv12,quality=70,scene=/x.jpg,shake=3,flicker=50,flicker_depth=0.2,latency=4,paced=false,seed=7,frames=300,noise=0.5,subject=0.6,light=2,exposure=12.5,gain=2,focus=123,gamma=1,buffers=6,colortemp=4000")
        #expect(o.width == 1920 && o.height == 1080 && o.fps == 60 && o.format == .nv12 && o.quality == 70)
        #expect(o.scene == "/x.jpg" && o.shake == 3 && o.flicker == 50 && o.flickerDepth == 0.2 && o.latency == 4)
        #expect(o.paced == false && o.seed == 7 && o.frames == 300 && o.noise == 0.5 && o.subject == 0.6 && o.light == 2)
        #expect(o.exposureMs == 12.5 && o.gain == 2 && o.focus == 123 && o.gamma == 1 && o.buffers == 6 && o.colorTemperature == 4000)
        let d = try SimOptions(deviceString: "sim")
        #expect(d == SimOptions())
        #expect(SimOptions.inFocusPosition(subjectDistance: 0.6) == 1000 * 0.2 / 0.6)
    }

    @Test(arguments: [
        ("sim:bogus=1", "bogus"), ("sim:width=abc", "width"), ("sim:width=641", "width"), ("sim:flicker=55", "flicker"),
        ("sim:format=rgb24", "format"), ("sim:paced=maybe", "paced"), ("sim:latency=0", "latency"), ("sim:gain=0.5", "gain"),
        ("sim:fps=-1", "fps"), ("sim:width", "width"), ("sim:seed=1,seed=2", "seed"), ("sim:noise=nan", "noise"),
    ])
    func rejectsBadOptions(_ s: String, _ option: String) {
        do {
            _ = try SimOptions(deviceString: s)
            Issue.record("accepted \(s)")
        } catch let DeviceError.invalidDeviceOption(device, o, reason) {
            #expect(device == s)
            #expect(o == option)
            #expect(!reason.isEmpty)
        } catch {
            Issue.record("wrong error \(error)")
        }
    }

    @Test func missingSceneFileIsAnOptionError() {
        #expect(throws: DeviceError.self) { _ = try SimCamera(deviceString: "sim:scene=/nonexistent/photo.jpg") }
        do { _ = try SimCamera(deviceString: "sim:scene=/nonexistent/photo.jpg") } catch let DeviceError.invalidDeviceOption(_, o, _) {
            #expect(o == "scene")
        } catch { Issue.record("wrong error \(error)") }
    }

    @Test func providerAndDiscovery() throws {
        let p = SimProvider()
        #expect(p.handles("sim") && p.handles("sim:width=640,height=480"))
        #expect(!p.handles("simulator") && !p.handles("/dev/video0"))
        let found = p.discover()
        #expect(found.count == 1)
        let info = try #require(found.first)
        #expect(info.id == "sim")
        let formats = Set(info.formats.compactMap(\.pixelFormat))
        #expect(formats.isSuperset(of: [.yuyv, .nv12, .mjpeg, .uyvy, .i420, .grey]))
        for f in info.formats {
            for (w, h) in [(640, 480), (1280, 720), (1920, 1080), (3840, 2160)] {
                #expect(f.sizes.contains { $0.contains(width: w, height: h) })
            }
            #expect(Set(f.sizes[0].intervals.map(\.fps)) == [15, 30, 60])
        }
        let names = Set(info.controls.map(\.name))
        for c in ["auto_exposure", "exposure_time_absolute", "gain", "focus_automatic_continuous", "focus_absolute",
                  "white_balance_automatic", "white_balance_temperature", "power_line_frequency"] {
            #expect(names.contains(c))
        }
        let dir = DeviceDirectory.core
        #expect(try dir.open("sim:width=64,height=64") is SimCamera)
        #expect(throws: DeviceError.self) { try dir.open("sim:nope=1") }
    }
}

@Suite struct SimCameraTests {
    @Test func controlsValidateAndReport() throws {
        let cam = try SimCamera(deviceString: "sim:width=64,height=64,paced=false")
        let c = cam.simControls
        #expect(try c.value(of: "exposure_time_absolute") == 100)
        #expect(try c.value(of: .gain) == 100)
        #expect(throws: DeviceError.self) { try c.set("zoom_absolute", to: 1) }
        #expect(throws: DeviceError.self) { try c.value(of: "zoom_absolute") }
        for (name, bad) in [("gain", 99), ("gain", 1601), ("exposure_time_absolute", 0), ("focus_absolute", 1001),
                            ("white_balance_temperature", 2805), ("auto_exposure", 2), ("power_line_frequency", 4)] {
            do { try c.set(name, to: Int64(bad)); Issue.record("accepted \(name)=\(bad)") } catch let DeviceError.controlOutOfRange(_, n, v, _) {
                #expect(n == name && v == Double(bad))
            } catch { Issue.record("wrong error \(error)") }
        }
        try c.set("gain", to: 250)
        #expect(try c.value(of: "gain") == 250)
        #expect(c.controlLatencyFrames == 2)
        #expect(c.descriptor(.exposureTime)?.range == 1...10000)
        #expect(c.descriptor(.whiteBalanceTemperature)?.flags.contains("inactive") == true)
    }

    @Test func framesCarryTruthSequenceAndEndOfStream() throws {
        let cam = try SimTest.open("sim:width=96,height=64,paced=false,frames=5,shake=2")
        var seqs: [UInt64] = []
        var last: UInt64 = 0
        while true {
            let e = try cam.next(timeoutNanoseconds: 1_000_000_000)
            guard case .frame(let f) = e else {
                guard case .endOfStream = e else { Issue.record("unexpected \(e)"); break }
                break
            }
            seqs.append(f.sequence)
            #expect(f.timestamp.clock == .monotonic && f.timestamp.nanoseconds >= last)
            last = f.timestamp.nanoseconds
            let t = try #require(f.metadata.truth)
            #expect(t.appliedExposure == 10_000 && f.metadata.exposureTime == 10_000)
            #expect(t.inFocusLensPosition == 400 && t.appliedLensPosition == 400 && f.metadata.lensPosition == 400)
            #expect(t.renderedMeanLuma > 20 && t.renderedMeanLuma < 235)
            #expect(t.sceneLuminance > 0.3 && t.sceneLuminance < 5)
            #expect(f.bytesUsed == f.format.maxByteCount)
            f.release()
        }
        #expect(seqs == [0, 1, 2, 3, 4])
        if case .endOfStream = try cam.next(timeoutNanoseconds: 1000) {} else { Issue.record("stream did not stay ended") }
    }

    /// Doubling the exposure adds one EV: with the pure power tone curve, luma scales by 2^(1/gamma)
    /// until highlights clip.
    @Test(arguments: [1.0, 2.2])
    func exposureDoublingAddsOneEV(gamma: Double) throws {
        let cam = try SimTest.open("sim:width=160,height=120,fps=10,paced=false,noise=1,gamma=\(gamma)")
        var means: [Double] = []
        for e in [5, 10, 20, 40, 80, 160, 320, 640] { // 100 µs units: 0.5 ms ... 64 ms
            try cam.simControls.set("exposure_time_absolute", to: Int64(e))
            var m = 0.0
            for _ in 0..<3 { let f = try SimTest.frame(cam); m = f.metadata.truth!.renderedMeanLuma; f.release() }
            means.append(m)
        }
        // EV = gamma * log2(luma); steps of one doubling should be 1 EV while not clipping.
        let ev = means.map { gamma * log2($0) }
        for i in 1...4 { #expect(abs(ev[i] - ev[i - 1] - 1) < 1.0 / 6, "step \(i): \(means)") }
        for i in 1..<means.count { #expect(means[i] >= means[i - 1], "\(means)") }
        // Saturation: the last doubling adds clearly less than one EV.
        #expect(ev[7] - ev[6] < 0.8, "\(means)")
    }

    @Test func gainActsLikeExposure() throws {
        let cam = try SimTest.open("sim:width=160,height=120,paced=false,noise=0,light=0.25,gamma=1")
        try cam.simControls.set("exposure_time_absolute", to: 20)
        _ = try SimTest.frame(cam).release()
        _ = try SimTest.frame(cam).release()
        let a = try SimTest.frame(cam); let ma = a.metadata.truth!.renderedMeanLuma; a.release()
        try cam.simControls.set("gain", to: 200)
        for _ in 0..<2 { try SimTest.frame(cam).release() }
        let b = try SimTest.frame(cam); let mb = b.metadata.truth!.renderedMeanLuma
        #expect(b.metadata.gain == 2)
        b.release()
        #expect(abs(log2(mb / ma) - 1) < 0.1, "\(ma) -> \(mb)")
    }

    @Test(arguments: [1, 2, 4])
    func controlLatencyIsExact(latency: Int) throws {
        let cam = try SimTest.open("sim:width=64,height=64,paced=false,noise=0,latency=\(latency)")
        var exposures: [Double] = []
        for k in 0..<12 {
            let f = try SimTest.frame(cam)
            #expect(f.sequence == UInt64(k))
            exposures.append(f.metadata.exposureTime!)
            f.release()
            if k == 3 { try cam.simControls.set("exposure_time_absolute", to: 50) }
        }
        // Set after frame 3 was delivered: frame 3 + latency is the first with the new value.
        for k in 0..<12 { #expect(exposures[k] == (k >= 3 + latency ? 5000 : 10_000), "frame \(k): \(exposures)") }
        #expect(cam.simControls.controlLatencyFrames == latency)
    }

    /// Contrast-detect focus: the Laplacian variance peaks at the true in-focus position and falls
    /// strictly on both sides, including within 2 % of the range of the peak.
    @Test func focusScorePeaksAtTruth() throws {
        let cam = try SimTest.open("sim:width=320,height=240,paced=false,noise=0,subject=0.5")
        let truth = 400.0
        var scores: [Int: Double] = [:]
        let offsets = [-320, -160, -80, -40, -20, -10, -5, 0, 5, 10, 20, 40, 80, 160, 320]
        for d in offsets {
            try cam.simControls.set("focus_absolute", to: Int64(truth) + Int64(d))
            for _ in 0..<2 { try SimTest.frame(cam).release() }
            let f = try SimTest.frame(cam)
            #expect(f.metadata.truth!.inFocusLensPosition == truth)
            #expect(f.metadata.lensPosition == truth + Double(d))
            #expect(abs(f.metadata.truth!.defocusBlur - Double(abs(d)) * 320 / 100_000) < 1e-9)
            scores[d] = SimTest.laplacianVariance(f)
            f.release()
        }
        for (a, b) in zip(offsets.filter { $0 >= 0 }, offsets.filter { $0 >= 0 }.dropFirst()) {
            #expect(scores[a]! > scores[b]!, "right side \(a) vs \(b): \(scores)")
        }
        let left = offsets.filter { $0 <= 0 }.reversed().map { $0 }
        for (a, b) in zip(left, left.dropFirst()) {
            #expect(scores[a]! > scores[b]!, "left side \(a) vs \(b): \(scores)")
        }
    }

    /// Under hand-shake (every frame a different sub-pixel position) and sensor noise, the focus
    /// score still peaks at the true position: the warp's cubic interpolation does not blur.
    @Test func focusScorePeaksAtTruthUnderShake() throws {
        let cam = try SimTest.open("sim:width=320,height=240,paced=false,noise=1,shake=3,seed=5")
        var scores: [Int: Double] = [:]
        for d in [-40, -20, 0, 20, 40] {
            try cam.simControls.set("focus_absolute", to: 400 + Int64(d))
            for _ in 0..<2 { try SimTest.frame(cam).release() }
            let f = try SimTest.frame(cam)
            scores[d] = SimTest.laplacianVariance(f)
            f.release()
        }
        #expect(scores[0]! > scores[-20]! && scores[0]! > scores[20]!, "\(scores)")
        #expect(scores[-20]! > scores[-40]! && scores[20]! > scores[40]!, "\(scores)")
    }

    /// The truth's shake offset is the image's real displacement: a brute-force SSD search with a
    /// parabolic sub-pixel fit between two frames recovers it within 0.5 px.
    @Test func shakeTruthMatchesImageDisplacement() throws {
        let cam = try SimTest.open("sim:width=240,height=180,paced=false,noise=0,shake=4,seed=3")
        let a = try SimTest.frame(cam)
        var b = try SimTest.frame(cam)
        var far = 0.0
        // Take the first later frame that moved at least 2 px (the path is smooth).
        for _ in 0..<40 {
            let ta = a.metadata.truth!, tb = b.metadata.truth!
            far = max(abs(tb.shakeX - ta.shakeX), abs(tb.shakeY - ta.shakeY))
            if far >= 2 { break }
            b.release()
            b = try SimTest.frame(cam)
        }
        #expect(far >= 2)
        let ta = a.metadata.truth!, tb = b.metadata.truth!
        let (w, h, pa) = SimTest.luma(a)
        let (_, _, pb) = SimTest.luma(b)
        a.release(); b.release()
        let r = 10
        func ssd(_ dx: Int, _ dy: Int) -> Double {
            // Content moved by (dx, dy): b(x + dx, y + dy) ≈ a(x, y).
            var s = 0.0
            for y in stride(from: h / 2 - 50, to: h / 2 + 50, by: 1) {
                for x in stride(from: w / 2 - 70, to: w / 2 + 70, by: 1) {
                    let d = pb[(y + dy) * w + x + dx] - pa[y * w + x]
                    s += d * d
                }
            }
            return s
        }
        var best = (0, 0), bestS = Double.infinity
        var table = [[Double]](repeating: [Double](repeating: 0, count: 2 * r + 1), count: 2 * r + 1)
        for dy in -r...r { for dx in -r...r { let s = ssd(dx, dy); table[dy + r][dx + r] = s; if s < bestS { bestS = s; best = (dx, dy) } } }
        func fit(_ m: Double, _ c: Double, _ p: Double) -> Double { let den = m - 2 * c + p; return den > 0 ? 0.5 * (m - p) / den : 0 }
        let (bx, by) = best
        #expect(abs(bx) < r && abs(by) < r)
        let sx = Double(bx) + fit(table[by + r][bx + r - 1], bestS, table[by + r][bx + r + 1])
        let sy = Double(by) + fit(table[by + r - 1][bx + r], bestS, table[by + r + 1][bx + r])
        #expect(abs(sx - (tb.shakeX - ta.shakeX)) < 0.5, "measured \(sx), truth \(tb.shakeX - ta.shakeX)")
        #expect(abs(sy - (tb.shakeY - ta.shakeY)) < 0.5, "measured \(sy), truth \(tb.shakeY - ta.shakeY)")
        #expect(abs(ta.shakeAngle) < 0.02 && abs(tb.shakeAngle) < 0.02)
    }

    /// Sub-pixel accuracy of the warp: a known translation (no rotation, no noise) is recovered by
    /// a Lucas–Kanade step to a few hundredths of a pixel, for fractions across the pixel.
    @Test func warpIsSubPixelAccurate() throws {
        var o = SimOptions()
        o.width = 240; o.height = 160; o.format = .grey; o.noise = 0; o.shake = 2
        let r = try SimRenderer(options: o, format: FrameFormat(.grey, width: 240, height: 160), interval: FrameInterval(fps: 30), image: nil)
        let pool = FramePool(format: r.format, count: 1)
        let f = try #require(pool.acquire())
        defer { f.release() }
        func render(_ dx: Double, _ dy: Double, _ angle: Double) -> [Double] {
            var st = SimFrameState()
            st.lensPosition = r.inFocusPosition
            st.shakeX = dx; st.shakeY = dy; st.shakeAngle = angle
            r.render(st, into: f)
            return SimTest.luma(f).px
        }
        for angle in [0.0, 0.001] {
            let base = render(0, 0, angle)
            for d in [0.1, 0.25, 0.4] {
                let img = render(d, -d, angle)
                var sxx = 0.0, sxy = 0.0, syy = 0.0, sxt = 0.0, syt = 0.0
                for y in 10..<150 {
                    for x in 10..<230 {
                        let i = y * 240 + x
                        let ix = (base[i + 1] - base[i - 1]) / 2, iy = (base[i + 240] - base[i - 240]) / 2, it = img[i] - base[i]
                        sxx += ix * ix; sxy += ix * iy; syy += iy * iy; sxt += ix * it; syt += iy * it
                    }
                }
                let det = sxx * syy - sxy * sxy
                let ex = (-syy * sxt + sxy * syt) / det, ey = (sxy * sxt - sxx * syt) / det
                #expect(abs(ex - d) < 0.06 && abs(ey + d) < 0.06, "angle \(angle), shift \(d): measured (\(ex), \(ey))")
            }
        }
    }

    /// Row means of a flickering frame divided by those of the same frame under steady light.
    static func banding(exposure: Int64, plf: Int64 = 0) throws -> (amplitude: Double, applied: Double) {
        let lit = try SimTest.open("sim:width=128,height=240,paced=false,noise=0,flicker=50,flicker_depth=0.4")
        let steady = try SimTest.open("sim:width=128,height=240,paced=false,noise=0,light=1")
        for c in [lit, steady] {
            try c.simControls.set("exposure_time_absolute", to: exposure)
            try c.simControls.set("power_line_frequency", to: plf)
        }
        for _ in 0..<2 { try SimTest.frame(lit).release(); try SimTest.frame(steady).release() }
        let f = try SimTest.frame(lit), g = try SimTest.frame(steady)
        let applied = f.metadata.exposureTime!
        let (w, h, a) = SimTest.luma(f)
        let (_, _, b) = SimTest.luma(g)
        f.release(); g.release()
        var ratios: [Double] = []
        for y in 0..<h {
            let ra = SimTest.mean(Array(a[(y * w)..<(y * w + w)])), rb = SimTest.mean(Array(b[(y * w)..<(y * w + w)]))
            if rb > 20 && rb < 230 { ratios.append(ra / rb) }
        }
        return ((ratios.max()! - ratios.min()!) / SimTest.mean(ratios), applied)
    }

    @Test func flickerBandsAtShortExposureOnly() throws {
        let short = try SimCameraTests.banding(exposure: 30)      // 3 ms at 50 Hz: bands
        let whole = try SimCameraTests.banding(exposure: 100)     // 10 ms = one light period: none
        let odd = try SimCameraTests.banding(exposure: 130)       // 13 ms: bands
        let fixed = try SimCameraTests.banding(exposure: 130, plf: 1) // anti-flicker rounds to 10 ms
        #expect(short.amplitude > 0.2, "3 ms: \(short)")
        #expect(whole.amplitude < 0.03, "10 ms: \(whole)")
        #expect(odd.amplitude > 0.03, "13 ms: \(odd)")
        #expect(fixed.applied == 10_000 && fixed.amplitude < 0.03, "13 ms with 50 Hz anti-flicker: \(fixed)")
    }

    @Test func liveSourceCountsPoolExhaustion() throws {
        let cam = try SimTest.open("sim:width=64,height=64,fps=100,buffers=2")
        #expect(cam.isLive)
        var held: [Frame] = []
        var lost = 0, events = 0
        // Hold every frame: after two, the pool is empty and each further frame is lost as
        // out_of_buffers. (A slow test machine may also see driver gaps; they are skipped.)
        while lost < 2 && events < 50 {
            events += 1
            switch try cam.next(timeoutNanoseconds: 1_000_000_000) {
            case .frame(let f): held.append(f)
            case .lost(.outOfBuffers, let n): lost += n
            case .lost(.driverGap, _), .timeout: continue
            default: Issue.record("unexpected event")
            }
        }
        #expect(held.count == 2)
        #expect(lost == 2)
        held.forEach { $0.release() }
        var got: Frame? = nil
        for _ in 0..<20 {
            if case .frame(let f) = try cam.next(timeoutNanoseconds: 1_000_000_000) { got = f; break }
        }
        let f = try #require(got, "no frame after the buffers came back")
        #expect(f.sequence >= 4)
        f.release()
    }

    @Test func nonLiveSourceWaitsForBuffers() throws {
        let cam = try SimTest.open("sim:width=64,height=64,paced=false,buffers=2")
        #expect(!cam.isLive)
        let a = try SimTest.frame(cam), b = try SimTest.frame(cam)
        if case .timeout = try cam.next(timeoutNanoseconds: 20_000_000) {} else { Issue.record("expected back-pressure (timeout)") }
        a.release()
        let c = try SimTest.frame(cam)
        #expect(c.sequence == 2)
        b.release(); c.release()
    }

    @Test func pacedSourceKeepsTimeAndReportsGaps() throws {
        let cam = try SimTest.open("sim:width=64,height=64,fps=100")
        func liveFrame() throws -> Frame {
            for _ in 0..<50 { if case .frame(let f) = try cam.next(timeoutNanoseconds: 1_000_000_000) { return f } }
            throw DeviceError.notRunning(device: "sim")
        }
        let a = try liveFrame()
        let b = try liveFrame()
        // Nominal capture times: exactly one interval per sequence number, on CLOCK_MONOTONIC.
        #expect(b.sequence > a.sequence)
        #expect(b.timestamp.nanoseconds - a.timestamp.nanoseconds == 10_000_000 * (b.sequence - a.sequence))
        let resume = b.sequence + 1
        a.release(); b.release()
        sleepUntil(monotonicNanoseconds: monotonicNanoseconds() + 55_000_000)
        var gap = 0
        while true {
            let e = try cam.next(timeoutNanoseconds: 1_000_000_000)
            if case .lost(.driverGap, let n) = e { gap += n; continue }
            guard case .frame(let f) = e else { Issue.record("unexpected \(e)"); break }
            #expect(f.sequence == resume + UInt64(gap))
            f.release()
            break
        }
        #expect(gap >= 4)
    }

    @Test func formatsShareTheSameLuma() throws {
        var lumas: [PixelFormat: [Double]] = [:]
        for fmt in [PixelFormat.yuyv, .uyvy, .nv12, .i420, .yuv422p, .grey] {
            let cam = try SimTest.open("sim:width=96,height=64,paced=false,noise=0,shake=1,format=\(fmt.rawValue)")
            let f = try SimTest.frame(cam)
            #expect(f.format.pixelFormat == fmt)
            lumas[fmt] = SimTest.luma(f).px
            if fmt == .nv12 {
                // Chroma: the sky is bluish (U > 128), the ground greenish (U, V < 128).
                let uv = f.plane(1)
                #expect(uv[1] != 128 || uv[0] != 128)
            }
            f.release()
        }
        for (_, l) in lumas { #expect(l == lumas[.yuyv]!) }
    }

    /// Chroma samples (U then V, row by row) of a frame in any YUV format.
    static func chroma(_ f: Frame) -> [UInt8] {
        let fm = f.format, cw = fm.width / 2
        let b = f.data.assumingMemoryBound(to: UInt8.self)
        var u: [UInt8] = [], v: [UInt8] = []
        switch fm.pixelFormat {
        case .yuyv, .uyvy:
            let o = fm.pixelFormat == .yuyv ? 1 : 0
            for y in 0..<fm.height { for xc in 0..<cw { u.append(b[y * fm.bytesPerRow + 4 * xc + o]); v.append(b[y * fm.bytesPerRow + 4 * xc + o + 2]) } }
        case .nv12:
            let p = fm.plane(1)
            for y in 0..<p.height { for xc in 0..<cw { u.append(b[p.offset + y * p.bytesPerRow + 2 * xc]); v.append(b[p.offset + y * p.bytesPerRow + 2 * xc + 1]) } }
        default:
            let p1 = fm.plane(1), p2 = fm.plane(2)
            for y in 0..<p1.height { for xc in 0..<cw { u.append(b[p1.offset + y * p1.bytesPerRow + xc]); v.append(b[p2.offset + y * p2.bytesPerRow + xc]) } }
        }
        return u + v
    }

    @Test func formatsShareTheSameChroma() throws {
        var c: [PixelFormat: [UInt8]] = [:]
        for fmt in [PixelFormat.yuyv, .uyvy, .yuv422p, .nv12, .i420] {
            let cam = try SimTest.open("sim:width=96,height=64,paced=false,noise=0,format=\(fmt.rawValue)")
            let f = try SimTest.frame(cam)
            c[fmt] = SimCameraTests.chroma(f)
            f.release()
        }
        #expect(c[.yuyv] == c[.uyvy] && c[.yuyv] == c[.yuv422p])
        #expect(c[.nv12] == c[.i420])
        // 4:2:0 chroma is the even rows of the 4:2:2 chroma.
        let cw = 48
        let full: [UInt8] = c[.yuyv]!
        var even422: [UInt8] = []
        for row in stride(from: 0, to: 64, by: 2) { even422 += full[(row * cw)..<(row * cw + cw)] }
        #expect(Array(c[.nv12]!.prefix(32 * cw)) == even422)
        // The scene has colour: neither plane is flat grey.
        #expect(Set(c[.yuyv]!).count > 8)
    }

    @Test func mjpegDecodesToTheRenderedPicture() throws {
        let cam = try SimTest.open("sim:width=160,height=96,paced=false,format=mjpeg,quality=90")
        let f = try SimTest.frame(cam)
        defer { f.release() }
        #expect(f.bytesUsed > 100 && f.bytesUsed <= f.capacity)
        let h = try #require(tjInitDecompress())
        defer { tjDestroy(h) }
        var w: Int32 = 0, ht: Int32 = 0, sub: Int32 = 0, cs: Int32 = 0
        #expect(tjDecompressHeader3(h, f.data.assumingMemoryBound(to: UInt8.self), UInt(f.bytesUsed), &w, &ht, &sub, &cs) == 0)
        #expect(w == 160 && ht == 96 && sub == Int32(TJSAMP_422.rawValue))
        var grey = [UInt8](repeating: 0, count: 160 * 96)
        let rc = grey.withUnsafeMutableBufferPointer {
            tjDecompress2(h, f.data.assumingMemoryBound(to: UInt8.self), UInt(f.bytesUsed), $0.baseAddress, 160, 0, 96, Int32(TJPF_GRAY.rawValue), 0)
        }
        #expect(rc == 0)
        let mean = Double(grey.reduce(0) { $0 + Int($1) }) / Double(grey.count)
        #expect(abs(mean - f.metadata.truth!.renderedMeanLuma) < 2, "decoded \(mean) vs rendered \(f.metadata.truth!.renderedMeanLuma)")
    }

    @Test func imageSceneIsFilmed() throws {
        // A PGM: left half dark, right half bright.
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sim-scene-\(getpid()).pgm").path
        var data = "P5\n64 32\n255\n".data(using: .ascii)!
        for _ in 0..<32 { for x in 0..<64 { data.append(x < 32 ? 30 : 220) } }
        try data.write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let cam = try SimTest.open("sim:width=128,height=64,paced=false,noise=0,scene=\(path)")
        let f = try SimTest.frame(cam)
        let (w, h, p) = SimTest.luma(f)
        f.release()
        let left = SimTest.mean((0..<h).map { p[$0 * w + 10] }), right = SimTest.mean((0..<h).map { p[$0 * w + w - 10] })
        #expect(left < 100 && right > 180, "left \(left) right \(right)")
        // Not an image:
        try "hello".data(using: .ascii)!.write(to: URL(fileURLWithPath: path))
        #expect(throws: DeviceError.self) { _ = try SimCamera(deviceString: "sim:scene=\(path)") }
        // Headers that read but cannot be used say why (3 Dec: a 20-digit width was read as
        // "999999999x999999999, maxval 99"; an oversized JPEG said "No error").
        try "P5\n99999999999999999999 4\n255\n".data(using: .ascii)!.write(to: URL(fileURLWithPath: path))
        #expect { try SimImage.load(path: path) } throws: { "\($0)".contains("more than 9 digits") }
        var jpeg = SimTest.grayJPEG(width: 16, height: 16)
        // The SOF0's height and width (after FF C0, length, precision): 65500 x 65500.
        let sof = try #require((0..<(jpeg.count - 1)).first { jpeg[$0] == 0xFF && jpeg[$0 + 1] == 0xC0 })
        jpeg[sof + 5] = 0xFF; jpeg[sof + 6] = 0xDC; jpeg[sof + 7] = 0xFF; jpeg[sof + 8] = 0xDC
        try Data(jpeg).write(to: URL(fileURLWithPath: path))
        #expect { try SimImage.load(path: path) } throws: { "\($0)".contains("65500x65500 is larger than a scene may be") && !"\($0)".contains("No error") }
    }

    @Test("a photograph's strong colours are filmed at their own chroma, not halved")
    func strongColoursKeepTheirChroma() throws {
        // A PPM of four bands: pure red, green, blue and mid grey. The scene kept chroma relative
        // to luma in 8 bits (±127/255 of it), so red came out (130, 63, 7) and blue greyish.
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("sim-colours-\(getpid()).ppm").path
        let bands: [(r: UInt8, g: UInt8, b: UInt8)] = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (128, 128, 128)]
        var data = "P6\n128 64\n255\n".data(using: .ascii)!
        for _ in 0..<64 { for x in 0..<128 { let c = bands[x / 32]; data.append(contentsOf: [c.r, c.g, c.b]) } }
        try data.write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        let cam = try SimTest.open("sim:width=128,height=64,paced=false,noise=0,scene=\(path)")
        // The camera's own white balance held at the light's 5200 K (its auto mode would take the
        // bands' mean for grey).
        try cam.simControls.set("white_balance_automatic", to: 0)
        for _ in 0..<3 { try SimTest.frame(cam).release() }
        let f = try SimTest.frame(cam)
        defer { f.release() }
        #expect(f.format.pixelFormat == .yuyv)
        // Each pixel pair's colour (rows 16..<48 averaged) to RGB, full-range BT.601. The sim
        // frames a crop of the picture (its margin for shake), so the bands are found, not assumed:
        // each colour's purest pair, and grey at the right edge.
        let pairs: [(r: Double, g: Double, b: Double)] = (0..<64).map { pair in
            var y = 0.0, u = 0.0, v = 0.0
            for row in 16..<48 {
                let o = row * f.format.bytesPerRow + pair * 4
                func at(_ i: Int) -> Double { Double(f.data.load(fromByteOffset: o + i, as: UInt8.self)) }
                y += (at(0) + at(2)) / 2; u += at(1); v += at(3)
            }
            y /= 32; u = u / 32 - 128; v = v / 32 - 128
            func c(_ x: Double) -> Double { min(255, max(0, x)) }
            return (c(y + 1.402 * v), c(y - 0.344136 * u - 0.714136 * v), c(y + 1.772 * u))
        }
        let red = pairs.max { $0.r - $0.g - $0.b < $1.r - $1.g - $1.b }!
        let green = pairs.max { $0.g - $0.r - $0.b < $1.g - $1.r - $1.b }!
        let blue = pairs.max { $0.b - $0.r - $0.g < $1.b - $1.r - $1.g }!
        let grey = pairs[63]
        #expect(red.g < 0.15 * red.r && red.b < 0.15 * red.r, "red \(red)")
        #expect(green.r < 0.15 * green.g && green.b < 0.15 * green.g, "green \(green)")
        #expect(blue.r < 0.15 * blue.b && blue.g < 0.15 * blue.b, "blue \(blue)")
        #expect(abs(grey.r - grey.g) < 3 && abs(grey.b - grey.g) < 3, "grey \(grey)")
    }

    @Test func builtInAutoExposureConverges() throws {
        let cam = try SimTest.open("sim:width=96,height=64,paced=false,light=0.1")
        try cam.simControls.set("auto_exposure", to: 3)
        var last = 0.0
        for _ in 0..<40 { let f = try SimTest.frame(cam); last = f.metadata.truth!.renderedMeanLuma; f.release() }
        #expect(abs(last - 110) < 12, "mean luma \(last)")
        #expect(try cam.simControls.value(of: "exposure_time_absolute") > 100)
    }

    @Test func builtInAutofocusReachesTruth() throws {
        let cam = try SimTest.open("sim:width=64,height=64,paced=false,focus=0,subject=0.4")
        try cam.simControls.set("focus_automatic_continuous", to: 1)
        #expect(cam.simControls.descriptor(.focusAbsolute)?.flags.contains("inactive") == true)
        var lens: [Double] = []
        for _ in 0..<30 { let f = try SimTest.frame(cam); lens.append(f.metadata.lensPosition!); f.release() }
        #expect(lens.last == SimOptions.inFocusPosition(subjectDistance: 0.4))
        for (a, b) in zip(lens, lens.dropFirst()) { #expect(b >= a && b - a <= 40) }
    }

    /// Manual white balance set warmer than the light (lower K) leaves a blue cast: U up, V down.
    @Test func manualWhiteBalanceCastsColour() throws {
        func meanUV(_ wb: Int64?) throws -> (Double, Double) {
            let cam = try SimTest.open("sim:width=96,height=64,paced=false,noise=0,format=yuv422p,colortemp=5200")
            if let wb {
                try cam.simControls.set("white_balance_automatic", to: 0)
                try cam.simControls.set("white_balance_temperature", to: wb)
            }
            for _ in 0..<2 { try SimTest.frame(cam).release() } // control latency
            let f = try SimTest.frame(cam)
            defer { f.release() }
            #expect(f.metadata.whiteBalance == Double(wb ?? 5200))
            let c = SimCameraTests.chroma(f).map(Double.init)
            let half = c.count / 2
            return (SimTest.mean(Array(c[..<half])), SimTest.mean(Array(c[half...])))
        }
        let auto = try meanUV(nil), warm = try meanUV(2800), cool = try meanUV(6500)
        #expect(warm.0 > auto.0 + 3 && warm.1 < auto.1 - 3, "auto \(auto), 2800 K \(warm)")
        #expect(cool.0 < auto.0 && cool.1 > auto.1, "auto \(auto), 6500 K \(cool)")
    }

    @Test func runsInTheEngine() throws {
        let cam = try SimCamera(deviceString: "sim:width=128,height=96,paced=false,frames=20,shake=2,flicker=60")
        let cfg = try cam.configure(StreamRequest(pixelFormat: .nv12, width: 128, height: 96, fps: 30))
        let e = CaptureEngine(source: cam, configuration: cfg, stages: [], consumers: [])
        try e.start()
        e.waitUntilFinished()
        #expect(e.statistics.captured == 20)
        #expect(throws: DeviceError.self) { try cam.configure(StreamRequest(pixelFormat: .rgb24, width: 128, height: 96)) }
        #expect(throws: DeviceError.self) { try cam.configure(StreamRequest(pixelFormat: .yuyv, width: 127, height: 96)) }
    }
}
