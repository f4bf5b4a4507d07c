import Testing
import Foundation
@testable import Viewfinder

/// A device with a fixed format list and no controls, for preset resolution.
final class ListedSource: CaptureSource, @unchecked Sendable {
    let info: DeviceInfo
    var isLive: Bool { false }
    var controls: (any DeviceControlling)? { nil }
    var activeConfiguration: StreamConfiguration?
    private let inner: PatternSource
    init(_ formats: [FormatDescription]) {
        info = DeviceInfo(id: "listed", name: "Listed", driver: "test", bus: "test", formats: formats, controls: [], isLive: false)
        inner = PatternSource(options: { var o = PatternSource.Options(); o.frames = 20; return o }())
    }
    func configure(_ r: StreamRequest) throws -> StreamConfiguration {
        guard info.formats.contains(where: { $0.pixelFormat == r.pixelFormat && $0.sizes.contains { $0.contains(width: r.width, height: r.height) } }) else {
            throw DeviceError.unsupportedFormat(device: "listed", requested: "\(r.pixelFormat) \(r.width)x\(r.height)", available: [])
        }
        let c = try inner.configure(StreamRequest(pixelFormat: r.pixelFormat == .mjpeg ? .yuyv : r.pixelFormat, width: r.width, height: r.height, fps: r.fps))
        activeConfiguration = c
        return c
    }
    func start() throws { try inner.start() }
    func next(timeoutNanoseconds: UInt64) throws -> SourceEvent { try inner.next(timeoutNanoseconds: timeoutNanoseconds) }
    func stop() {}
}

func webcamFormats() -> [FormatDescription] {
    let i = [FrameInterval(fps: 30), FrameInterval(fps: 15)]
    return [
        FormatDescription(pixelFormat: .mjpeg, fourcc: PixelFormat.mjpeg.fourcc, description: "Motion-JPEG", compressed: true, sizes: [
            .discrete(width: 640, height: 480, intervals: i), .discrete(width: 1280, height: 720, intervals: i), .discrete(width: 1920, height: 1080, intervals: i)]),
        FormatDescription(pixelFormat: .yuyv, fourcc: PixelFormat.yuyv.fourcc, description: "YUYV 4:2:2", compressed: false, sizes: [
            .discrete(width: 640, height: 480, intervals: i), .discrete(width: 1280, height: 720, intervals: [FrameInterval(fps: 10)]), .discrete(width: 320, height: 240, intervals: i)]),
    ]
}

@Suite struct SessionTests {
    @Test func pointsOfInterestMapThroughRotationAndMirroring() {
        // The user taps the top-left corner of what they see.
        let tl = NormalizedPoint(x: 0, y: 0)
        // No rotation: the sensor's top-left.
        #expect(CaptureConnection.sensorPoint(fromUserPoint: tl, rotation: 0, mirrored: false) == NormalizedPoint(x: 0, y: 0))
        // Mirrored: the sensor's top-right.
        #expect(CaptureConnection.sensorPoint(fromUserPoint: tl, rotation: 0, mirrored: true) == NormalizedPoint(x: 1, y: 0))
        // Picture turned 90° clockwise: what the user sees top-left was the sensor's bottom-left.
        #expect(CaptureConnection.sensorPoint(fromUserPoint: tl, rotation: 90, mirrored: false) == NormalizedPoint(x: 0, y: 1))
        #expect(CaptureConnection.sensorPoint(fromUserPoint: tl, rotation: 180, mirrored: false) == NormalizedPoint(x: 1, y: 1))
        #expect(CaptureConnection.sensorPoint(fromUserPoint: tl, rotation: 270, mirrored: false) == NormalizedPoint(x: 1, y: 0))
        // Rotated 90° and mirrored: user top-left → (after un-mirroring) user top-right → sensor top-left.
        #expect(CaptureConnection.sensorPoint(fromUserPoint: tl, rotation: 90, mirrored: true) == NormalizedPoint(x: 0, y: 0))
        // A point off the diagonals, both ways round, for every orientation.
        let p = NormalizedPoint(x: 0.2, y: 0.7)
        for r in [0, 90, 180, 270] {
            for m in [false, true] {
                let s = CaptureConnection.sensorPoint(fromUserPoint: p, rotation: r, mirrored: m)
                let back = CaptureConnection.userPoint(fromSensorPoint: s, rotation: r, mirrored: m)
                #expect(abs(back.x - p.x) < 1e-12 && abs(back.y - p.y) < 1e-12, "rotation \(r) mirrored \(m)")
            }
        }
        // Rendering a marker: a sensor pixel at (0.9, 0.1) (near the top-right) shows, after a
        // clockwise quarter turn, near the bottom-right.
        #expect(CaptureConnection.userPoint(fromSensorPoint: NormalizedPoint(x: 0.9, y: 0.1), rotation: 90, mirrored: false) == NormalizedPoint(x: 0.9, y: 0.9))
    }

    @Test func presetsResolveAgainstTheDevice() {
        let f = webcamFormats()
        #expect(SessionPreset.hd1920x1080.resolve(formats: f, active: nil, requested: nil) == StreamRequest(pixelFormat: .mjpeg, width: 1920, height: 1080, fps: 30))
        // Uncompressed is preferred at the same size.
        #expect(SessionPreset.vga640x480.resolve(formats: f, active: nil, requested: nil)?.pixelFormat == .yuyv)
        #expect(SessionPreset.hd4K3840x2160.resolve(formats: f, active: nil, requested: nil) == nil)
        #expect(SessionPreset.photo.resolve(formats: f, active: nil, requested: nil)?.width == 1920)
        #expect(SessionPreset.low.resolve(formats: f, active: nil, requested: nil)?.width == 320)
        #expect(SessionPreset.medium.resolve(formats: f, active: nil, requested: nil)?.height == 720)
    }

    @Test func canSetPresetAndInvalidPresetIsRejectedWhole() throws {
        let dev = CaptureDevice(source: ListedSource(webcamFormats()))
        let session = CaptureSession()
        try session.addInput(CaptureDeviceInput(device: dev))
        #expect(session.canSetSessionPreset(.hd1280x720))
        #expect(!session.canSetSessionPreset(.hd4K3840x2160))
        try session.setSessionPreset(.hd1280x720)
        let out = NullConsumer()
        session.beginConfiguration()
        try session.addOutput(out)
        try session.setSessionPreset(.hd4K3840x2160)
        #expect(throws: SessionError.presetUnsupported(preset: "3840x2160", device: "listed", available: ["640x480", "1280x720", "1920x1080", "320x240"])) {
            try session.commitConfiguration()
        }
        // Nothing of the batch was applied.
        #expect(session.sessionPreset == .hd1280x720)
        #expect(session.outputs.isEmpty)
    }

    @Test func aSecondVideoInputIsRefused() throws {
        let session = CaptureSession()
        let a = CaptureDeviceInput(device: CaptureDevice(source: PatternSource()))
        let b = CaptureDeviceInput(device: CaptureDevice(source: PatternSource()))
        try session.addInput(a)
        #expect(!session.canAddInput(b))
        #expect(throws: SessionError.self) { try session.addInput(b) }
        #expect(throws: SessionError.self) { try session.addInput(a) }
    }

    @Test func connectionsFormByMediaTypeAndOnlyEnabledOnesDeliver() throws {
        let session = CaptureSession()
        let dev = CaptureDevice(source: try PatternSource(deviceString: "pattern:width=64,height=32,frames=30"))
        try session.addInput(CaptureDeviceInput(device: dev))
        let a = VideoDataOutput(name: "a", alwaysDiscardsLateVideoFrames: false)
        let b = VideoDataOutput(name: "b", alwaysDiscardsLateVideoFrames: false)
        session.beginConfiguration()
        try session.addOutput(a)
        try session.addOutput(b)
        try session.setSessionPreset(.inputPriority)
        try session.commitConfiguration()
        #expect(session.connections.count == 2)
        session.connections.first { $0.output === b }!.isEnabled = false
        final class Counter: VideoDataOutputDelegate, @unchecked Sendable {
            let n = LockedBox(0)
            func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) { n.withLock { $0 += 1 } }
        }
        let ca = Counter(), cb = Counter()
        a.setDelegate(ca, queue: nil)
        b.setDelegate(cb, queue: nil)
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        #expect(ca.n.withLock { $0 } == 30)
        #expect(cb.n.withLock { $0 } == 0)
        #expect(throws: SessionError.unsupportedRotation(45)) { try session.connections[0].setVideoRotationAngle(45) }
    }

    @Test func videoDataOutputDeliversOnTheCallersQueueAndAsAnAsyncSequence() async throws {
        let session = CaptureSession()
        let dev = CaptureDevice(source: try PatternSource(deviceString: "pattern:width=64,height=32,frames=40"))
        try session.addInput(CaptureDeviceInput(device: dev))
        let out = VideoDataOutput(alwaysDiscardsLateVideoFrames: false)
        try session.addOutput(out)
        try session.setSessionPreset(.inputPriority)
        let q = DispatchQueue(label: "test.frames")
        let key = DispatchSpecificKey<String>()
        q.setSpecific(key: key, value: "test.frames")
        final class OnQueue: VideoDataOutputDelegate, @unchecked Sendable {
            let ok = LockedBox((0, 0))
            let key: DispatchSpecificKey<String>
            init(key: DispatchSpecificKey<String>) { self.key = key }
            func videoDataOutput(_ output: VideoDataOutput, didOutput sampleBuffer: SampleBuffer, from connection: CaptureConnection?) {
                let label = DispatchQueue.getSpecific(key: key)
                ok.withLock { $0.0 += 1; if label == "test.frames" { $0.1 += 1 } }
            }
        }
        let d = OnQueue(key: key)
        out.setDelegate(d, queue: q)
        let stream = out.frames()
        try session.startRunning()
        var seen: [UInt64] = []
        for await vf in stream { seen.append(vf.frame.sequence) }
        session.stopRunning()
        q.sync {}
        let (calls, onQueue) = d.ok.withLock { $0 }
        #expect(calls == 40 && onQueue == 40)
        #expect(seen == seen.sorted() && !seen.isEmpty)
    }

    @Test func deviceConfigurationNeedsTheLockAndAppliesAtomically() throws {
        let dev = CaptureDevice(source: PatternSource())
        #expect(throws: SessionError.notLockedForConfiguration(device: "pattern")) { try dev.setExposureTargetBias(1) }
        try dev.lockForConfiguration()
        #expect(throws: SessionError.lockedByAnotherClient(device: "pattern")) { try dev.lockForConfiguration() }
        try dev.setExposureTargetBias(1)
        // Staged, not yet in force.
        #expect(dev.settings.exposureTargetBias == 0)
        dev.unlockForConfiguration()
        #expect(dev.settings.exposureTargetBias == 1)
        // A failing batch changes nothing and releases the lock.
        #expect(throws: SessionError.self) {
            try dev.configure { s in s.exposureTargetBias = 2; try dev.setExposurePointOfInterest(NormalizedPoint(x: 2, y: 0)) }
        }
        #expect(dev.settings.exposureTargetBias == 1)
        #expect(!dev.isLockedForConfiguration)
        // Without exposure controls, auto modes are not offered.
        #expect(!dev.isExposureModeSupported(.continuous))
        #expect(throws: SessionError.self) { try dev.configure { _ in try dev.setExposureMode(.continuous) } }
    }

    @Test func runtimeErrorsReachTheSessionAndOutputsFinish() throws {
        let session = CaptureSession()
        try session.addInput(CaptureDeviceInput(device: CaptureDevice(source: FailingSource(after: 5))))
        try session.setSessionPreset(.inputPriority)
        let out = MetadataWriter(path: FileManager.default.temporaryDirectory.appendingPathComponent("vf-\(UUID()).jsonl").path)
        try session.addOutput(out)
        let events = LockedBox<[String]>([])
        session.onEvent { e in events.withLock { $0.append("\(e)") } }
        try session.startRunning()
        session.waitUntilFinished()
        session.stopRunning()
        let ev = events.withLock { $0 }
        #expect(ev.contains("interrupted: video device not available"))
        #expect(ev.contains { $0.hasPrefix("runtime error: device 'failing' was disconnected") })
        // What was captured before the error was written, and the file was closed.
        #expect(out.lines == 5)
        #expect(try String(contentsOfFile: out.path, encoding: .utf8).split(separator: "\n").count == 5)
    }
}
