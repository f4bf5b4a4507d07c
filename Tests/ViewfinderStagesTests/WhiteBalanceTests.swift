import Testing
import Foundation
import Viewfinder
import ViewfinderSim
import ViewfinderV4L2
@testable import ViewfinderStages

/// Real photographs to film with the sim camera, in two sets from different Debian packages (and
/// so different photographers): photographs only, drawings and renders left out. Each package is
/// fetched once with `apt-get download` into /tmp; a set is empty when its packages cannot be
/// fetched (offline). `scripts/wb_eval.py` evaluates estimators on the same two sets in Python.
enum WhiteBalancePhotos {
    /// A package, and its photographs' paths under the extracted `usr/share`.
    struct Source: Sendable {
        var package: String
        var files: [String]
        var root: String { "/tmp/viewfinder-wb-\(package)" }
    }
    /// The set the estimator was developed and tuned on: `lomiri-wallpapers-16.04` (its 14
    /// photographs), `lomiri-wallpapers-20.04` (Kleiber) and `mate-backgrounds` (its 12 nature
    /// photographs).
    static let trainingSources = [
        Source(package: "lomiri-wallpapers-16.04", files: ["Bridge_by_Sander_Klootwijk", "Dragonfly_by_Bolly", "Picture_0B_by_freespace", "Picture_1A_by_freespace", "Wine_by_Jakkub_Mede", "aitzgorri_by_Aitzol_Berasategi", "analogpattern_by_Peter_Nerlich", "free_by_Peter_Nerlich", "friends_by_Aitzol_Berasategi", "greentock_by_Peter_Nerlich", "life_by_Aitzol_Berasategi", "picosdeeuropa_by_Aitzol_Berasategi", "seeding_by_Clements_Engelhardt", "sunset_by_Aitzol_Berasategi"].map { "backgrounds/\($0).jpg" }),
        Source(package: "lomiri-wallpapers-20.04", files: ["backgrounds/Kleiber_by_Lukas_Baubkus.jpg"]),
        Source(package: "mate-backgrounds", files: ["Aqua", "Blinds", "Dune", "FreshFlower", "Garden", "GreenMeadow", "LadyBird", "RainDrops", "Storm", "TwoWings", "Wood", "YellowFlower"].map { "backgrounds/mate/nature/\($0).jpg" }),
    ]
    /// The held-out set, never looked at while tuning: the 11 photographs of
    /// `plasma-workspace-wallpapers`.
    static let heldOutSources = [
        Source(package: "plasma-workspace-wallpapers", files: ["BytheWater", "ColdRipple", "DarkestHour", "EveningGlow", "FallenLeaf", "Grey", "Kite", "OneStandsOut", "Path", "summer_1am"].map { "wallpapers/\($0)/contents/images/2560x1600.jpg" } + ["wallpapers/Volna/contents/images/5120x2880.jpg"]),
    ]
    static func fetch(_ s: Source) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "mkdir -p \(s.root) && cd \(s.root) && apt-get download \(s.package) >/dev/null 2>&1 && dpkg -x \(s.package)_*.deb x"]
        try? p.run()
        p.waitUntilExit()
    }
    /// A photograph's short name: the wallpaper's folder for Plasma's, else the file's name.
    static func name(_ path: String) -> String {
        if let r = path.range(of: "/wallpapers/") { return String(path[r.upperBound...].prefix { $0 != "/" }) }
        return (path as NSString).lastPathComponent
    }
    static func photos(_ sources: [Source]) -> [String] {
        var out: [String] = []
        for s in sources {
            let paths = s.files.map { "\(s.root)/x/usr/share/\($0)" }
            if !paths.allSatisfy({ FileManager.default.fileExists(atPath: $0) }) { fetch(s) }
            out += paths.filter { FileManager.default.fileExists(atPath: $0) }
        }
        return out
    }
    static let training = photos(trainingSources)
    static let heldOut = photos(heldOutSources)
}

@Suite("White balance")
struct WhiteBalanceTests {
    /// Runs the white-balance stage on the sim camera (unpaced, 320x180); returns the last
    /// frame's `whiteBalance` and the sim's true light.
    static func run(_ device: String, options: String, frames: Int = 30, setup: ((SimCamera) throws -> Void)? = nil) throws -> (estimate: Double, truth: Double, states: [ControlLoopState?]) {
        let spec = try #require(try StageSpec.parseList("white_balance:" + options).first)
        let stage = try #require(try WhiteBalanceStage.make(options: spec.options) as? WhiteBalanceStage)
        var last = 0.0, truth = 0.0, states: [ControlLoopState?] = []
        try runSim(device, width: 320, height: 180, frames: frames, stages: [stage], setup: setup) { _, f in
            last = f.metadata.whiteBalance ?? .nan
            truth = f.metadata.truth?.colorTemperature ?? .nan
            states.append(f.metadata.whiteBalanceState)
        }
        return (last, truth, states)
    }

    @Test("Kelvin <-> gains: the map is exact both ways and follows AVFoundation's conventions")
    func gainsRoundTrip() {
        for k in stride(from: 2000.0, through: 12000, by: 500) {
            for tint in [-100.0, 0, 60] {
                let g = WhiteBalanceModel.gains(for: .init(temperature: k, tint: tint))
                #expect(min(g.redGain, g.greenGain, g.blueGain) == 1, "normalised so the smallest gain is 1")
                let back = WhiteBalanceModel.temperatureAndTint(for: g)
                #expect(abs(back.temperature - k) < 1e-6 * k && abs(back.tint - tint) < 1e-6, "\(k) K tint \(tint) -> \(g) -> \(back)")
            }
        }
        // Warm light needs more blue gain, blue light more red.
        let warm = WhiteBalanceModel.gains(for: .init(temperature: 3000)), cool = WhiteBalanceModel.gains(for: .init(temperature: 9000))
        #expect(warm.blueGain > warm.redGain && cool.redGain > cool.blueGain)
        #expect(WhiteBalanceModel.gains(for: .init(temperature: WhiteBalanceModel.nativeTemperature)) == WhiteBalanceGains(redGain: 1, greenGain: 1, blueGain: 1))
    }

    @Test("continuous, driving the sim's white_balance_temperature: within 10 % of the light", arguments: [3000.0, 4000, 6500])
    func continuousDevice(kelvin: Double) throws {
        let r = try Self.run("sim:colortemp=\(Int(kelvin)),paced=false", options: "mode=continuous")
        #expect(r.truth == kelvin)
        #expect(abs(r.estimate - kelvin) / kelvin < 0.10, "estimate \(r.estimate) K, light \(kelvin) K")
        #expect(r.states.last == .converged)
    }

    /// Mean chroma (Cb, Cr) of a frame, every 4th sample.
    static func meanChroma(_ f: Frame) -> (Double, Double) {
        guard let px = f.pixels, let cb = px.cb, let cr = px.cr else { return (.nan, .nan) }
        var su = 0.0, sv = 0.0, n = 0.0
        for y in stride(from: 0, to: cb.height, by: 4) { for x in stride(from: 0, to: cb.width, by: 4) { su += Double(cb[x, y]); sv += Double(cr[x, y]); n += 1 } }
        return (su / n, sv / n)
    }

    @Test("continuous, software gains (the camera's own balance fixed at 5200 K): within 10 %, and the picture as a balanced camera renders it", arguments: [2500.0, 3000, 6500, 9000])
    func continuousSoftware(kelvin: Double) throws {
        let device = "sim:colortemp=\(Int(kelvin)),paced=false,format=yuv422p"
        // The reference: the sim's own balance set to the light (a perfectly balanced camera).
        var reference = (0.0, 0.0)
        try runSim(device, format: .yuv422p, width: 320, height: 180, frames: 3, stages: []) { _, f in reference = Self.meanChroma(f) }
        let spec = try #require(try StageSpec.parseList("white_balance:mode=continuous:correction=software").first)
        let stage = try #require(try WhiteBalanceStage.make(options: spec.options) as? WhiteBalanceStage)
        var estimate = 0.0, first = (0.0, 0.0), last = (0.0, 0.0)
        try runSim(device, format: .yuv422p, width: 320, height: 180, frames: 30, stages: [stage], setup: { cam in
            try cam.simControls.set("white_balance_automatic", to: 0)
            try cam.simControls.set("white_balance_temperature", to: 5200)
        }) { i, f in
            estimate = f.metadata.whiteBalance ?? .nan
            if i == 0 { first = Self.meanChroma(f) }
            last = Self.meanChroma(f)
        }
        #expect(abs(estimate - kelvin) / kelvin < 0.10, "estimate \(estimate) K, light \(kelvin) K")
        #expect(stage.uncorrected == 0)
        #expect(abs(last.0 - reference.0) < 1.5 && abs(last.1 - reference.1) < 1.5, "corrected mean chroma \(last), balanced camera \(reference), first frame \(first)")
    }

    @Test("locked: holds temperature_k, reports it, and does not measure")
    func locked() throws {
        let r = try Self.run("sim:colortemp=3000,paced=false", options: "mode=locked:temperature_k=4500", frames: 10)
        #expect(r.estimate == 4500)
        #expect(r.states.allSatisfy { $0 == .locked })
    }

    @Test("auto: converges, then locks")
    func autoLocks() throws {
        let r = try Self.run("sim:colortemp=3500,paced=false", options: "mode=auto", frames: 40)
        #expect(abs(r.estimate - 3500) / 3500 < 0.10, "estimate \(r.estimate)")
        #expect(r.states.last == .locked)
        #expect(r.states.first == .adjusting)
    }

    @Test("a grey picture (nothing to measure) keeps the last estimate and counts the frames")
    func unmeasurable() throws {
        let stage = WhiteBalanceStage(options: WhiteBalanceOptions())
        let f = FrameFormat(.yuv422p, width: 64, height: 64)
        let pool = FramePool(format: f, count: 1)
        try stage.prepare(format: f, context: StageContext(format: f))
        let fr = try #require(pool.acquire())
        memset(fr.data, 128, f.maxByteCount)
        fr.bytesUsed = f.maxByteCount
        #expect(stage.process(fr) == .forward)
        #expect(fr.metadata.whiteBalance == WhiteBalanceModel.nativeTemperature)
        #expect(stage.unmeasurable == 1 && stage.measured == 0)
        fr.release()
    }

    @Test("CaptureDevice: every mode supported, locked gains round-trip through temperature and tint, bad gains refused, the lock required")
    func deviceAPI() throws {
        let device = CaptureDevice(source: try SimCamera(deviceString: "sim:paced=false"))
        #expect(WhiteBalanceMode.allCases.allSatisfy(device.isWhiteBalanceModeSupported))
        #expect(device.hasWhiteBalanceControl)
        let gains = device.deviceWhiteBalanceGains(for: .init(temperature: 4000, tint: 10))
        #expect(throws: SessionError.self) { try device.setWhiteBalanceModeLocked(with: gains) }
        try device.lockForConfiguration()
        #expect(throws: SessionError.self) { try device.setWhiteBalanceModeLocked(with: WhiteBalanceGains(redGain: 0.5, greenGain: 1, blueGain: 1)) }
        #expect(throws: SessionError.self) { try device.setWhiteBalanceModeLocked(with: WhiteBalanceGains(redGain: 5, greenGain: 1, blueGain: 1)) }
        // Within maxGain but balancing for no light in range (a red alone: it read back as
        // r 2.053 g 1 b 1.616, a magenta picture): refused, not changed into another colour.
        #expect(throws: SessionError.self) { try device.setWhiteBalanceModeLocked(with: WhiteBalanceGains(redGain: 3, greenGain: 1, blueGain: 1)) }
        try device.setWhiteBalanceModeLocked(with: gains)
        device.unlockForConfiguration()
        #expect(device.settings.whiteBalanceMode == .locked)
        let tt = try #require(device.settings.whiteBalanceTemperatureAndTint)
        #expect(abs(tt.temperature - 4000) < 1e-6 && abs(tt.tint - 10) < 1e-6)
        let now = device.deviceWhiteBalanceGains
        #expect(abs(now.redGain - gains.redGain) < 1e-9 && abs(now.blueGain - gains.blueGain) < 1e-9)
        #expect(abs(device.temperatureAndTintValues(for: now).temperature - 4000) < 1e-6)
        try device.configure { $0.whiteBalanceMode = .continuous }
        device.noteWhiteBalance(3000)
        // The sim's own loop is on by default (white_balance_automatic = 1): gains follow the frames.
        #expect(abs(device.temperatureAndTintValues(for: device.deviceWhiteBalanceGains).temperature - 3000) < 1e-6)
    }

    @Test("min_k must be below max_k")
    func badOptions() throws {
        #expect(throws: ConfigurationError.self) { _ = try WhiteBalanceStage.make(options: ["min_k": .number(9000), "max_k": .number(3000)]) }
    }

    /// Films each photograph at 3000 and 6500 K with the device's balance driven (320x180, 20
    /// frames); returns the share of (photo, light) pairs within 10 % and the median error, and
    /// prints the table the README quotes.
    static func evaluate(_ photos: [String], label: String) throws -> (within: Double, median: Double) {
        var errors: [Double] = []
        var lines: [String] = []
        for photo in photos {
            var row = WhiteBalancePhotos.name(photo)
            for k in [3000.0, 6500] {
                let r = try Self.run("sim:colortemp=\(Int(k)),paced=false,scene=\(photo)", options: "mode=continuous", frames: 20)
                let e = (r.estimate - k) / k
                errors.append(abs(e))
                row += String(format: "  %5.0f K -> %5.0f K (%+.1f %%)", k, r.estimate, 100 * e)
            }
            lines.append(row)
        }
        let within = Double(errors.filter { $0 < 0.10 }.count) / Double(errors.count)
        let sorted = errors.sorted()
        let median = errors.count % 2 == 1 ? sorted[errors.count / 2] : (sorted[errors.count / 2 - 1] + sorted[errors.count / 2]) / 2
        print("white balance, \(label), \(photos.count) photographs: \(Int((within * 100).rounded())) % of the pairs within 10 %, median error \(String(format: "%.1f", median * 100)) %, worst \(String(format: "%.0f", (sorted.last ?? 0) * 100)) %\n" + lines.joined(separator: "\n"))
        return (within, median)
    }

    /// A camera JPEG decoded at full size (software correction needs every pixel; `--output` asks
    /// for it too) is measured as its reduced decode would be: at full size JPEG's chroma ringing
    /// read 5090 K under a 3000 K light and said converged, the reduced decode 2982 K.
    @Test("an MJPEG camera's full-size picture gives the light its reduced decode gives")
    func mjpegAtFullSizeMeasuresAsReduced() throws {
        let spec = try #require(try StageSpec.parseList("white_balance:mode=continuous:correction=software").first)
        let stage = try #require(try WhiteBalanceStage.make(options: spec.options) as? WhiteBalanceStage)
        var last = 0.0, truth = 0.0, scale = 0
        let scales = TimeLog()
        try runSim("sim:paced=false,seed=5,colortemp=3000,format=mjpeg", format: .mjpeg, width: 640, height: 480, frames: 40, stages: [stage],
                   decoder: try MJPEGPixelDecoder(), scales: scales,
                   setup: { cam in try cam.controls?.set(.whiteBalanceAuto, to: 0); try cam.controls?.set(.whiteBalanceTemperature, to: 5200) }) { _, f in
            last = f.metadata.whiteBalance ?? .nan
            truth = f.metadata.truth?.colorTemperature ?? .nan
        }
        scale = Int(scales.milliseconds.first ?? 0)
        #expect(scale == 1, "the software correction decodes at full size (scale \(scale))")
        #expect(abs(last - truth) / truth < 0.1, "\(Int(last)) K under \(Int(truth)) K")
    }

    @Test("one picture, one estimate: 4:2:0 and 4:2:2 frames of a photograph give the same light", .enabled(if: !WhiteBalancePhotos.training.isEmpty, "photographs could not be fetched (apt-get download)"))
    func chromaSubsamplingDoesNotMoveTheEstimate() throws {
        // 3 Dec (an outside sweep): stepping over chroma rows sampled 4:2:0 at half 4:2:2's
        // vertical density; on Kleiber at 3500 K NV12 settled at 3721 K against YUYV's 3506 K.
        for photo in WhiteBalancePhotos.training.filter({ $0.contains("Kleiber") || $0.contains("Bridge") || $0.contains("Wine") }) {
            var estimates: [PixelFormat: Double] = [:]
            for format in [PixelFormat.yuyv, .nv12, .i420] {
                let spec = try #require(try StageSpec.parseList("white_balance:mode=continuous:correction=software").first)
                let stage = try #require(try WhiteBalanceStage.make(options: spec.options) as? WhiteBalanceStage)
                try runSim("sim:colortemp=3500,paced=false,noise=0,seed=7,scene=\(photo)", format: format, width: 640, height: 480, frames: 30, stages: [stage]) { _, f in
                    estimates[format] = f.metadata.whiteBalance
                }
            }
            let y = try #require(estimates[.yuyv])
            for format in [PixelFormat.nv12, .i420] {
                let e = try #require(estimates[format])
                #expect(abs(e - y) / y < 0.005, "\(WhiteBalancePhotos.name(photo)): \(format) \(Int(e)) K, yuyv \(Int(y)) K")
            }
        }
    }

    /// The issue asks for every photograph within 10 %; that is not met. Measured (2026-11-23): the
    /// training set 31 % of the pairs within 10 %, median error 20.0 %; the held-out set 36 %,
    /// median 15.5 %; since the sim films strong colours at full chroma (3 Dec) 28 % (21.5 %) and
    /// 36 % (18.2 %). The bounds below guard that level (README, "White balance") against
    /// regressions; they are not the goal.
    @Test("real photographs as sim scenes: the training set", .enabled(if: !WhiteBalancePhotos.training.isEmpty, "photographs could not be fetched (apt-get download)"))
    func photographsTraining() throws {
        let r = try Self.evaluate(WhiteBalancePhotos.training, label: "training set")
        #expect(r.within >= 0.25, "\(r.within * 100) % of the pairs within 10 %")
        #expect(r.median < 0.25)
    }

    @Test("real photographs as sim scenes: the held-out set", .enabled(if: !WhiteBalancePhotos.heldOut.isEmpty, "photographs could not be fetched (apt-get download)"))
    func photographsHeldOut() throws {
        let r = try Self.evaluate(WhiteBalancePhotos.heldOut, label: "held-out set")
        #expect(r.within >= 0.27, "\(r.within * 100) % of the pairs within 10 %")
        #expect(r.median < 0.22)
    }
}
