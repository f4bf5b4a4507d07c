import Testing
import Foundation
@testable import ViewfinderKit
@testable import Viewfinder

/// A session on `device` with continuous auto-exposure, locked focus, and a video data output
/// that queues rather than discards, so a test sees every frame.
func continuousExposureSession(_ device: CaptureDevice) throws -> (CaptureSession, VideoDataOutput) {
    let session = CaptureSession(registry: .builtIn)
    session.beginConfiguration()
    try session.addInput(CaptureDeviceInput(device: device))
    try session.setSessionPreset(.inputPriority)
    let out = VideoDataOutput(alwaysDiscardsLateVideoFrames: false)
    try session.addOutput(out)
    try session.commitConfiguration()
    try device.configure { s in s.exposureMode = .continuous; s.focusMode = .locked }
    return (session, out)
}

/// Runs `session` to its end and gives `luma` of every frame `out` delivered (where it has one).
func runRecordingLuma(_ session: CaptureSession, _ out: VideoDataOutput, _ luma: @escaping @Sendable (Frame) -> Double?) throws -> [Double] {
    final class Lumas: VideoDataOutputDelegate, @unchecked Sendable {
        let values = LockedBox<[Double]>([])
        let luma: @Sendable (Frame) -> Double?
        init(_ luma: @escaping @Sendable (Frame) -> Double?) { self.luma = luma }
        func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
            if let m = luma(sampleBuffer.frame) { values.withLock { $0.append(m) } }
        }
    }
    let l = Lumas(luma)
    out.setDelegate(l, queue: nil)
    try session.startRunning()
    session.waitUntilFinished()
    session.stopRunning()
    return l.values.withLock { $0 }
}

@Suite struct KitTests {
    @Test func standardDirectoryOpensEveryKindAndNamesTheBadOnes() throws {
        let dir = DeviceDirectory.standard
        #expect(try dir.open("sim:width=320,height=240").info.driver.contains("sim"))
        #expect(try dir.open("pattern:width=64,height=32").info.id.hasPrefix("pattern"))
        #expect(throws: DeviceError.self) { try dir.open("webcam7") }
        #expect(throws: DeviceError.self) { try dir.open("sim:widht=320") }
        #expect(throws: (any Error).self) { try dir.open("/dev/video-does-not-exist") }
        #expect(throws: (any Error).self) { try dir.open("dump:/nonexistent.vfdump") }
        #expect(dir.discover().contains { $0.id == "sim" })
    }

    @Test func builtInStagesAreRegisteredWithDocumentedOptions() throws {
        let names = StageRegistry.builtIn.names
        for n in ["exposure", "focus", "stabilise", "deadline", "null"] { #expect(names.contains(n), "\(n)") }
        for n in names {
            let t = try StageRegistry.builtIn.type(named: n)
            #expect(!t.summary.isEmpty)
            for o in t.optionDocumentation { #expect(!o.summary.isEmpty, "\(n).\(o.name)") }
            // Every default meets its own field's rules: a typed spec with the defaults is made.
            func defaultsPass<S: Stage>(_ type: S.Type) throws {
                try S.Options().checkFields()
                _ = try StageRegistry.builtIn.makeStage(.stage(type))
            }
            #expect(throws: Never.self, "\(n)") { try defaultsPass(t) }
        }
    }

    @Test func deviceModesBecomeControlStagesWithSensorPoints() throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240", directory: .standard)
        let session = CaptureSession(registry: .builtIn)
        let input = CaptureDeviceInput(device: dev)
        try session.addInput(input)
        try session.addOutput(NullConsumer())
        let connection = try #require(session.connections.first)
        try connection.setVideoRotationAngle(90)
        try dev.configure { s in
            s.exposureMode = .continuous
            s.focusMode = .auto
            s.exposurePointOfInterest = NormalizedPoint(x: 0, y: 0)   // the user's top-left
        }
        let specs = try BuiltInControlStages().controlStages(for: dev.settings, device: dev, sensorPoint: { connection.sensorPoint(fromUserPoint: $0) })
        #expect(specs.map(\.name) == [ExposureStage.name, FocusStage.name, WhiteBalanceStage.name])
        #expect(specs.allSatisfy { $0.isTyped })
        // Continuous white balance on a camera with its own loop (the sim's white_balance_automatic).
        #expect(specs[2].options(of: WhiteBalanceStage.self)?.correction == .deviceAutomatic)
        try dev.configure { s in s.whiteBalanceMode = .locked; s.whiteBalanceTemperatureAndTint = .init(temperature: 4000) }
        let locked = try BuiltInControlStages().controlStages(for: dev.settings, device: dev, sensorPoint: { $0 })
        let wb = try #require(locked.last?.options(of: WhiteBalanceStage.self))
        #expect(wb.mode == .locked && wb.temperatureK == 4000 && wb.correction == .auto)
        // Turned 90° clockwise, the user's top-left is the sensor's bottom-left.
        let exposure = try #require(specs[0].options(of: ExposureStage.self))
        #expect(exposure.point == NormalizedPoint(x: 0, y: 1))
        #expect(exposure.metering == .spot)
        #expect(exposure.mode == .continuous)
        #expect(specs[1].options(of: FocusStage.self)?.mode == .auto)
        // The typed spec also reads as the untyped one would.
        #expect(specs[0].options["point"] == .array([.number(0), .number(1)]))
        for s in specs { _ = try StageRegistry.builtIn.makeStage(s) }
    }

    @Test func continuousExposureThroughTheSessionBrightensADarkScene() throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240,paced=false,frames=60,exposure=1,gain=1,latency=2", directory: .standard)
        let (session, out) = try continuousExposureSession(dev)
        let v = try runRecordingLuma(session, out) { $0.metadata.truth?.renderedMeanLuma }
        #expect(v.count == 60)
        let first = v.first ?? 0, last = v.last ?? 0
        #expect(last > first * 2, "mean luma went from \(first) to \(last)")
        #expect(last > 95 && last < 135, "converged to \(last), target about 110")
    }
}

@Suite struct PipelineOwnedControlTests {
    /// A pipeline that runs its own exposure stage keeps the device's continuous exposure from
    /// running a second loop beside it: the picture settles at the pipeline stage's target, not
    /// somewhere between its target and the device loop's.
    @Test func thePipelinesOwnStageIsTheOnlyLoopOfItsKind() throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240,paced=false,frames=90,exposure=8,gain=1,latency=2", directory: .standard)
        let (session, out) = try continuousExposureSession(dev)
        try session.setStages([.stage(ExposureStage.self) { $0.targetLuma = 50 }])
        #expect(dev.settings.exposureMode == .continuous)
        let v = try runRecordingLuma(session, out) { $0.metadata.meteredLuma }
        #expect(v.count == 90)
        let settled = v.suffix(20)
        let lo = settled.min() ?? 0, hi = settled.max() ?? 0
        #expect(lo > 40 && hi < 60, "the last 20 frames metered \(lo)...\(hi) for the pipeline stage's target 50")
    }
}

@Suite struct RuntimeConfigurationTests {
    /// Device settings changed under the configuration lock while the session runs take effect
    /// between frames, without a restart.
    @Test func exposureBiasChangedWhileRunningTakesEffect() throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240,paced=false,frames=140,exposure=8,latency=2", directory: .standard)
        let (session, out) = try continuousExposureSession(dev)
        final class Recorder: VideoDataOutputDelegate, @unchecked Sendable {
            let device: CaptureDevice
            let lumas = LockedBox<[Double]>([])
            init(_ d: CaptureDevice) { device = d }
            func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
                let frame = sampleBuffer.frame
                let n = lumas.withLock { l -> Int in l.append(frame.metadata.truth?.renderedMeanLuma ?? 0); return l.count }
                if n == 70 { try? device.configure { $0.exposureTargetBias = 1 } }
            }
        }
        let r = Recorder(dev)
        out.setDelegate(r, queue: nil)
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        let l = r.lumas.withLock { $0 }
        #expect(l.count == 140)
        let before = l[50..<70].reduce(0, +) / 20
        let after = l[120..<140].reduce(0, +) / 20
        // +1 EV is about ×1.37 in gamma-2.2 luma (less where highlights clip).
        #expect(after > before * 1.2, "mean luma \(before) before the change, \(after) after")
    }
}

@Suite struct VideoOutputConversionKitTests {
    /// The frames a video data output delivers as BGRA from a sim camera in `format`.
    func bgraFrames(_ device: String) throws -> [[UInt8]] {
        let dev = try CaptureDevice.open(device, directory: .standard)
        let session = CaptureSession(registry: .builtIn)
        try session.addInput(CaptureDeviceInput(device: dev))
        try session.setSessionPreset(.inputPriority)
        let out = VideoDataOutput(alwaysDiscardsLateVideoFrames: false)
        try out.setVideoSettings(VideoOutputSettings(pixelFormat: .bgra))
        final class Keep: VideoDataOutputDelegate, @unchecked Sendable {
            let frames = LockedBox<[[UInt8]]>([])
            let drops = LockedBox<[DropReason]>([])
            func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
                #expect(sampleBuffer.format == FrameFormat(.bgra, width: 320, height: 240))
                frames.withLock { $0.append(sampleBuffer.withUnsafeBytes { Array($0) }) }
            }
            func videoDataOutput(_ output: VideoDataOutput, didDrop sequence: UInt64, reason: DropReason) { drops.withLock { $0.append(reason) } }
        }
        let k = Keep()
        out.setDelegate(k, queue: nil)
        try session.addOutput(out)
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        #expect(k.drops.withLock { $0 }.isEmpty)
        return k.frames.withLock { $0 }
    }

    /// A camera's MJPEG is decoded by the device's own (TurboJPEG) decoder on the output's thread:
    /// the BGRA picture matches the same scene delivered as YUYV, up to JPEG loss.
    @Test func mjpegFramesArriveAsBGRAOfTheSamePicture() throws {
        let opts = "width=320,height=240,paced=false,frames=4,noise=0,shake=0"
        let jpeg = try bgraFrames("sim:\(opts),format=mjpeg")
        let yuyv = try bgraFrames("sim:\(opts),format=yuyv")
        #expect(jpeg.count == 4 && yuyv.count == 4)
        guard let a = jpeg.last, let b = yuyv.last, a.count == b.count else { return }
        var diff = 0.0
        for i in stride(from: 0, to: a.count, by: 4) { for k in 0..<3 { diff += abs(Double(a[i + k]) - Double(b[i + k])) } }
        let mean = diff / Double(a.count / 4 * 3)
        #expect(mean < 6, "BGRA from MJPEG differs from BGRA from YUYV by \(mean) levels on average")
        #expect(Set(a).count > 50, "a real picture, not a flat fill")
    }
}

@Suite struct FrameRateWhileRunningTests {
    /// A new min frame duration on a running sim session: the measured interval changes without a
    /// restart (sequences continue, nothing dropped) and the exposure loop's limit follows it.
    @Test func theIntervalChangesAndTheExposureLimitFollows() throws {
        // A dark scene: the loop runs to its longest exposure (the frame interval) and holds there.
        let dev = try CaptureDevice.open("sim:width=160,height=120,fps=60,paced=true,frames=90,light=0.002,exposure=1,latency=2,flicker=0", directory: .standard)
        let (session, out) = try continuousExposureSession(dev)
        struct Seen { var sequence: UInt64; var t: UInt64; var aeExposure: Double? }
        final class Recorder: VideoDataOutputDelegate, @unchecked Sendable {
            let device: CaptureDevice
            let seen = LockedBox<[Seen]>([])
            let drops = LockedBox(0)
            init(_ d: CaptureDevice) { device = d }
            func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
                let f = sampleBuffer.frame
                let n = seen.withLock { s -> Int in
                    s.append(Seen(sequence: f.sequence, t: f.timestamp.nanoseconds, aeExposure: f.metadata.custom.value(MetadataKey("ae.exposure_us"))))
                    return s.count
                }
                if n == 40 { try? device.configure { $0.activeVideoMinFrameDuration = FrameInterval(numerator: 1, denominator: 20) } }
            }
            func videoDataOutput(_ output: VideoDataOutput, didDrop sequence: UInt64, reason: DropReason) { drops.withLock { $0 += 1 } }
        }
        let r = Recorder(dev)
        out.setDelegate(r, queue: nil)
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        let s = r.seen.withLock { $0 }
        #expect(s.count + r.drops.withLock { $0 } == 90)
        #expect(dev.lastFrameRateChange == .appliedWhileStreaming(FrameInterval(numerator: 1, denominator: 20)))
        func medianInterval(_ range: Range<Int>) -> Double {
            let d = range.dropFirst().compactMap { i -> Double? in
                s[i].sequence == s[i - 1].sequence + 1 ? Double(s[i].t - s[i - 1].t) / 1e6 : nil
            }.sorted()
            return d.isEmpty ? 0 : d[d.count / 2]
        }
        let before = medianInterval(5..<38), after = medianInterval(50..<s.count)
        #expect(abs(before - 16.67) < 1.5, "median interval before the change \(before) ms")
        #expect(abs(after - 50) < 2, "median interval after the change \(after) ms")
        // The exposure loop's longest exposure followed the frame interval.
        let aeBefore = s[20..<38].compactMap(\.aeExposure).max() ?? 0
        let aeAfter = s[75..<s.count].compactMap(\.aeExposure).max() ?? 0
        #expect(aeBefore <= 16_700 && aeBefore > 10_000, "AE exposure before \(aeBefore) µs")
        #expect(aeAfter > 30_000 && aeAfter <= 50_000, "AE exposure after \(aeAfter) µs")
    }
}

@Suite struct DigitalZoomTests {
    /// Runs a grey sim (no noise, no shake) and returns every frame's pixels and metadata.
    func run(_ sim: String, configure: (CaptureDevice) throws -> Void) throws -> (frames: [[UInt8]], metadata: [FrameMetadata], device: CaptureDevice) {
        let dev = try CaptureDevice.open(sim, directory: .standard)
        let (session, out) = try continuousExposureSession(dev)
        try configure(dev)
        final class Grab: VideoDataOutputDelegate, @unchecked Sendable {
            let frames = LockedBox<[[UInt8]]>([])
            let metadata = LockedBox<[FrameMetadata]>([])
            func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
                let f = sampleBuffer.frame
                frames.withLock { $0.append(Array(UnsafeRawBufferPointer(f.bytes))) }
                metadata.withLock { $0.append(f.metadata) }
            }
        }
        let g = Grab()
        out.setDelegate(g, queue: nil)
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        return (g.frames.withLock { $0 }, g.metadata.withLock { $0 }, dev)
    }

    static let sim = "sim:width=320,height=240,format=grey,paced=false,frames=8,noise=0,shake=0,seed=3,latency=2"

    /// A monochrome camera takes every white-balance mode and the session still runs (the stage
    /// that refuses GREY is not added for the device's modes; 2 Dec review).
    @Test func whiteBalanceModesOnAGreyCameraDoNotStopTheSession() throws {
        for mode in [WhiteBalanceMode.continuous, .auto] {
            let r = try run(Self.sim) { d in
                try d.lockForConfiguration()
                try d.setWhiteBalanceMode(mode)
                d.unlockForConfiguration()
            }
            #expect(r.frames.count == 8, "\(mode)")
        }
    }

    /// A scene feature at full-frame point p shows, zoomed by 2, at c + 2·(p − c): the zoomed
    /// frame matches the centre half of the plain frame scaled up.
    @Test func theCentreIsCroppedAndScaledBackUp() throws {
        let plain = try run(Self.sim) { d in try d.configure { $0.exposureMode = .locked } }
        let zoomed = try run(Self.sim) { d in try d.configure { $0.exposureMode = .locked; $0.videoZoomFactor = 2 } }
        let a = try #require(plain.frames.last), b = try #require(zoomed.frames.last)
        let w = 320, h = 240
        var err = 0.0, n = 0.0, flat = 0.0
        for y in stride(from: 8, to: h - 8, by: 3) {
            for x in stride(from: 8, to: w - 8, by: 3) {
                // The source point of output (x, y): c + (q − c)/2, bilinear in the plain frame.
                let sx = Double(w - 1) / 2 + (Double(x) - Double(w - 1) / 2) / 2
                let sy = Double(h - 1) / 2 + (Double(y) - Double(h - 1) / 2) / 2
                let x0 = Int(sx), y0 = Int(sy), fx = sx - Double(x0), fy = sy - Double(y0)
                func p(_ x: Int, _ y: Int) -> Double { Double(a[y * w + x]) }
                let ref = (p(x0, y0) * (1 - fx) + p(x0 + 1, y0) * fx) * (1 - fy) + (p(x0, y0 + 1) * (1 - fx) + p(x0 + 1, y0 + 1) * fx) * fy
                err += abs(Double(b[y * w + x]) - ref)
                flat += abs(Double(a[y * w + x]) - Double(b[y * w + x]))
                n += 1
            }
        }
        #expect(err / n < 2.0, "mean |zoomed − reference crop| = \(err / n) grey levels")
        #expect(flat / n > 4 * max(err / n, 0.5), "the zoomed frame differs from the plain one by only \(flat / n)")
        #expect(zoomed.metadata.last?.custom.value(MetadataKey("zoom.factor")) == 2)
        #expect(zoomed.device.videoZoomFactor == 2)
    }

    /// A point of interest given in the zoomed picture meters the full-frame point under it.
    @Test func pointsOfInterestMapThroughTheZoom() throws {
        let r = try run(Self.sim) { d in
            try d.configure { $0.videoZoomFactor = 2; $0.exposurePointOfInterest = NormalizedPoint(x: 0.75, y: 0.25) }
        }
        let m = try #require(r.metadata.last)
        #expect(abs((m.custom.value(MetadataKey("ae.spot_x")) ?? 0) - 0.625) < 1e-9)
        #expect(abs((m.custom.value(MetadataKey("ae.spot_y")) ?? 0) - 0.375) < 1e-9)
    }

    /// A ramp at 2 powers of two per second from 1 to 4 takes one second: 30 frames at 30 fps.
    @Test func aRampReachesTheFactorAtTheRate() throws {
        let r = try run("sim:width=160,height=120,fps=30,paced=false,frames=40,noise=0,latency=2") { d in
            try d.lockForConfiguration()
            try d.ramp(toVideoZoomFactor: 4, withRate: 2)
            d.unlockForConfiguration()
        }
        let z = r.metadata.map { $0.custom.value(MetadataKey("zoom.factor")) ?? 0 }
        #expect(z.count == 40)
        // After k frames the factor is 2^(2k/30); it reaches 4 at frame 30.
        #expect(abs(z[14] - pow(2, 2.0 * 15 / 30)) < 1e-6, "factor after 15 frames \(z[14])")
        #expect(z[28] < 4 && z[29] == 4 && z.last == 4, "factors \(z[26...31])")
    }

    @Test func digitalZoomOnMJPEGIsRefused() throws {
        let dev = try CaptureDevice.open("sim:width=320,height=240,format=mjpeg,paced=false,frames=4", directory: .standard)
        try dev.lockForConfiguration()
        defer { dev.unlockForConfiguration() }
        #expect(!dev.hasOpticalZoom && dev.maxAvailableVideoZoomFactor == CaptureDevice.maxDigitalZoomFactor)
        #expect(throws: SessionError.unsupportedMode(device: "sim:width=320,height=240,format=mjpeg,paced=false,frames=4", mode: "digital zoom",
                                                     reason: "it streams MJPEG, a compressed format (crop and resample need YUV or grey frames)")) {
            try dev.setVideoZoomFactor(2)
        }
        // RGB and Bayer streams too (2 Dec: accepted, and the picture was not zoomed).
        for (format, kind) in [("rgb24", "RGB24, an RGB format"), ("sbggr8", "SBGGR8, a Bayer format")] {
            let id = "pattern:width=64,height=32,format=\(format),frames=4"
            let d = try CaptureDevice.open(id, directory: .standard)
            try d.lockForConfiguration()
            defer { d.unlockForConfiguration() }
            #expect(throws: SessionError.unsupportedMode(device: id, mode: "digital zoom", reason: "it streams \(kind) (crop and resample need YUV or grey frames)")) {
                try d.setVideoZoomFactor(2)
            }
        }
    }
}
