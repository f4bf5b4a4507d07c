import Foundation
import Testing
import Viewfinder
@testable import ViewfinderSinks

/// Records every delegate call in order.
final class PhotoEvents: PhotoCaptureDelegate, @unchecked Sendable {
    // @unchecked Sendable: state behind `lock`.
    let lock = ConditionLock()
    var calls: [String] = []
    var photos: [CapturePhoto] = []
    var errors: [PhotoCaptureError?] = []
    var finalError: PhotoCaptureError?
    func photoOutput(_ output: PhotoOutput, willBeginCaptureFor resolved: ResolvedPhotoSettings) { lock.withLock { calls.append("willBegin") } }
    func photoOutput(_ output: PhotoOutput, willCapturePhotoFor resolved: ResolvedPhotoSettings) { lock.withLock { calls.append("willCapture") } }
    func photoOutput(_ output: PhotoOutput, didCapturePhotoFor resolved: ResolvedPhotoSettings) { lock.withLock { calls.append("didCapture") } }
    func photoOutput(_ output: PhotoOutput, didFinishProcessingPhoto photo: CapturePhoto?, resolved: ResolvedPhotoSettings, error: PhotoCaptureError?) {
        lock.withLock { calls.append("didFinishProcessing"); if let photo { photos.append(photo) }; errors.append(error) }
    }
    func photoOutput(_ output: PhotoOutput, didFinishCaptureFor resolved: ResolvedPhotoSettings, error: PhotoCaptureError?) {
        lock.withLock { calls.append("didFinishCapture"); finalError = error }
    }
    static func expected(_ images: Int) -> [String] {
        ["willBegin", "willCapture", "didCapture"] + Array(repeating: "didFinishProcessing", count: images) + ["didFinishCapture"]
    }
}

/// Exposure controls that apply a change `latency` frames later, as a camera does.
final class FakeExposureControls: DeviceControlling, @unchecked Sendable {
    // @unchecked Sendable: used from one thread in these tests.
    var values: [String: Int64] = ["auto_exposure": 0, "exposure_time_absolute": 100, "gain": 100]
    var history: [(String, Int64)] = []
    var pendingApply: [(frame: Int, exposure: Int64, gain: Int64)] = []
    var appliedExposure: Int64 = 100
    var appliedGain: Int64 = 100
    var frame = 0
    let controlLatencyFrames = 2
    var descriptors: [ControlDescriptor] {
        [ControlDescriptor(id: 1, name: "auto_exposure", kind: .menu, minimum: 0, maximum: 3, step: 1, defaultValue: 0, standard: .exposureAuto),
         ControlDescriptor(id: 2, name: "exposure_time_absolute", kind: .integer, minimum: 1, maximum: 150, step: 1, defaultValue: 100, standard: .exposureTime),
         ControlDescriptor(id: 3, name: "gain", kind: .integer, minimum: 100, maximum: 1600, step: 1, defaultValue: 100, standard: .gain)]
    }
    func value(of name: String) throws -> Int64 { values[name] ?? 0 }
    func set(_ name: String, to value: Int64) throws {
        values[name] = value
        history.append((name, value))
        pendingApply.append((frame + controlLatencyFrames, values["exposure_time_absolute"]!, values["gain"]!))
    }
    /// Advances one frame and stamps it with what the sensor applied.
    func expose(_ f: Frame) {
        frame += 1
        while let p = pendingApply.first, p.frame <= frame { appliedExposure = p.exposure; appliedGain = p.gain; pendingApply.removeFirst() }
        f.metadata.exposureTime = Double(appliedExposure) * 100
        f.metadata.gain = Double(appliedGain) / 100
    }
}

@Suite struct PhotoOutputTests {
    let format = FrameFormat(.yuyv, width: 320, height: 240)
    func config(_ f: FrameFormat) -> StreamConfiguration { StreamConfiguration(format: f, interval: FrameInterval(fps: 30), bufferCount: 8) }

    /// PSNR of the decoded luma against the source's luma.
    func lumaPSNR(_ jpeg: [UInt8], source: Frame) throws -> Double {
        let dec = try JPEGDecoder()
        let d = try jpeg.withUnsafeBytes { try dec.decodePlanes($0) }
        let f = source.format
        guard let (off, stride, bpr) = f.lumaLayout else { return 0 }
        var se = 0.0
        let p = source.data.assumingMemoryBound(to: UInt8.self)
        for y in 0..<f.height { for x in 0..<f.width {
            let diff = Double(d.y[y * d.width + x]) - Double(p[off + y * bpr + x * stride]); se += diff * diff
        } }
        let mse = se / Double(f.width * f.height)
        return 10 * log10(255 * 255 / max(mse, 1e-9))
    }

    @Test func singleJPEGWithExifInAVFoundationOrder() throws {
        let output = PhotoOutput()
        try output.start(configuration: config(format))
        let events = PhotoEvents()
        let settings = PhotoSettings(codec: .jpeg(quality: 92, subsampling: nil), orientation: .right)
        output.capture(settings: settings, delegate: events)
        let pool = FramePool(format: format, count: 2)
        let f = pool.acquire()!
        fillFrame(f, index: 3)
        f.metadata.exposureTime = 10_000
        f.metadata.gain = 2.0
        output.consume(f)
        #expect(events.calls == PhotoEvents.expected(1))
        let photo = try #require(events.photos.first)
        #expect(photo.resolvedSettings.uniqueID == settings.uniqueID)
        #expect(photo.resolvedSettings.codec == "jpeg")
        #expect(photo.resolvedSettings.subsampling == .s422)
        #expect(photo.resolvedSettings.width == 320)
        let jpeg = photo.fileDataRepresentation()
        #expect(try lumaPSNR(jpeg, source: f) > 35)
        let exif = try jpeg.withUnsafeBytes { try JPEGMarkers.readExif($0) }
        #expect(exif.orientation == 6)
        #expect(exif.iso == 200)
        #expect(exif.exposure == 0.01)
        #expect(exif.date?.count == 19)
        // ffmpeg reads it too.
        let dir = makeTempDirectory()
        try photo.write(to: dir + "/p.jpg")
        #expect(throws: SinkError.fileExists(path: dir + "/p.jpg")) { try photo.write(to: dir + "/p.jpg") }
        try photo.write(to: dir + "/p.jpg", overwrite: true)
        let probe = try ffprobe(dir + "/p.jpg")
        #expect(intValue(probe.stream("video")?["width"]) == 320)
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir) == ["p.jpg"])  // no temporary left behind
        f.release()
        try? FileManager.default.removeItem(atPath: dir)
    }

    @Test func settingsAreUsableOnceAndFailuresStillCallEverything() throws {
        let output = PhotoOutput()
        let notRunning = PhotoEvents()
        output.capture(settings: PhotoSettings(), delegate: notRunning)
        #expect(notRunning.calls == PhotoEvents.expected(1))
        #expect(notRunning.finalError == .notRunning)

        try output.start(configuration: config(format))
        let settings = PhotoSettings(rawCompanion: true)
        let first = PhotoEvents(), second = PhotoEvents()
        output.capture(settings: settings, delegate: first)
        output.capture(settings: settings, delegate: second)
        #expect(second.calls == PhotoEvents.expected(2))
        #expect(second.finalError == .settingsReused(uniqueID: settings.uniqueID))
        #expect(second.errors.allSatisfy { $0 == .settingsReused(uniqueID: settings.uniqueID) })

        let bad = PhotoEvents()
        output.capture(settings: PhotoSettings(codec: .jpeg(quality: 0, subsampling: nil)), delegate: bad)
        #expect(bad.finalError == .invalidSettings("JPEG quality 0 is outside 1...100"))
        let noBracketer = PhotoEvents()
        output.capture(settings: PhotoSettings(exposureBiases: [-1, 1]), delegate: noBracketer)
        #expect(noBracketer.calls == PhotoEvents.expected(2))

        // The session ends before a frame arrives: the pending capture still completes, with the error.
        output.finish(error: nil)
        #expect(first.calls == PhotoEvents.expected(2))
        #expect(first.finalError == .sessionEnded)
        #expect(settings.copyWithNewID().uniqueID != settings.uniqueID)
    }

    /// A replay (a non-live source, as fast as its outputs take it) held at the chosen frame: a
    /// capture asked for after `startRunning()` gets that frame, and a burst consecutive frames
    /// with none lost as late (3 Dec sweep: `snap --warmup 2` on a 6-frame dump failed 7 of 7
    /// times — the replay had ended — and a burst of 5 lost 9 frames).
    @Test func aReplayIsHeldAtTheChosenFrameForACapture() throws {
        for (frames, hold, burst) in [(6, 2, 1), (40, 10, 5), (20, 0, 3)] {
            let photo = PhotoOutput()
            photo.replayHoldFrame = hold
            let (session, _) = try simSession("sim:width=64,height=64,paced=false,frames=\(frames)", outputs: [photo], lockLoops: true)
            try session.startRunning()
            let photos = try photo.capturePhotos(settings: PhotoSettings(burstCount: burst), timeoutSeconds: 20)
            session.waitUntilFinished()
            session.stopRunning()
            #expect(photos.map(\.sequence) == (hold..<(hold + burst)).map(UInt64.init), "\(frames) frames, hold \(hold), burst \(burst)")
            #expect(photo.droppedFrames.total == 0)
            #expect(session.statistics?.delivered == UInt64(frames), "the replay went on to its end")
        }
    }

    /// A burst withdrawn in the middle (`snap --burst` and Ctrl-C) delivers the shots it took; the
    /// rest end with `cancelled` (every shot was lost with the process).
    @Test func aBurstCancelledInTheMiddleKeepsItsShots() throws {
        let output = PhotoOutput()
        try output.start(configuration: config(format))
        let events = PhotoEvents()
        let settings = PhotoSettings(burstCount: 5)
        output.capture(settings: settings, delegate: events)
        let pool = FramePool(format: format, count: 2)
        for i in 0..<4 {
            if i == 2 { output.cancel(uniqueID: settings.uniqueID) }
            let f = pool.acquire()!
            fillFrame(f, index: i)
            output.consume(f)
            f.release()
        }
        #expect(events.photos.map(\.sequence).count == 2)
        #expect(events.errors.filter { $0 == .cancelled }.count == 3)
        #expect(events.finalError == .cancelled)
        #expect(events.calls.last == "didFinishCapture")
    }

    @Test func burstWithRawCompanions() throws {
        let output = PhotoOutput()
        try output.start(configuration: config(format))
        let events = PhotoEvents()
        output.capture(settings: PhotoSettings(rawCompanion: true, burstCount: 3), delegate: events)
        let pool = FramePool(format: format, count: 2)
        var sources: [[UInt8]] = []
        for i in 0..<5 {
            let f = pool.acquire()!
            fillFrame(f, index: i)
            if i < 3 { sources.append(Array(f.bytes)) }
            output.consume(f)
            f.release()
        }
        #expect(events.calls == PhotoEvents.expected(6))
        #expect(events.finalError == nil)
        let raws = events.photos.filter(\.isRawPhoto)
        let jpegs = events.photos.filter { !$0.isRawPhoto }
        #expect(raws.count == 3 && jpegs.count == 3)
        #expect(raws.map(\.sequence) == [0, 1, 2])
        for (i, r) in raws.enumerated() {
            let (info, pixels) = try RawStill.parse(r.fileDataRepresentation())
            #expect(info.width == 320 && info.pixelFormat == "yuyv" && info.fourcc == "YUYV" && info.bytesPerRow == 640)
            #expect(Array(pixels) == sources[i])
            #expect(r.fileExtension == "vfraw")
        }
    }

    @Test func exposureBracketDrivesTheDeviceAndRestoresIt() throws {
        let output = PhotoOutput()
        let controls = FakeExposureControls()
        output.bracketer = DeviceExposureBracketer(controls: controls)
        try output.start(configuration: config(format))
        let events = PhotoEvents()
        output.capture(settings: PhotoSettings(exposureBiases: [-1, 0, 1, 2]), delegate: events)
        let pool = FramePool(format: format, count: 2)
        for i in 0..<40 {
            let f = pool.acquire()!
            fillFrame(f, index: i, noise: 0)
            controls.expose(f)
            output.consume(f)
            f.release()
        }
        #expect(events.calls == PhotoEvents.expected(4))
        #expect(events.finalError == nil)
        // 10 ms base: 5 ms, 10 ms, 15 ms (the range's limit) with gain 1.33 for +1 EV, 15 ms with gain 2.67 for +2 EV.
        let taken = events.photos.map { ($0.metadata.exposureTime ?? 0) * ($0.metadata.gain ?? 0) }
        #expect(taken.count == 4)
        for (t, bias) in zip(taken, [-1.0, 0, 1, 2]) { #expect(abs(log2(t / 10_000) - bias) < 0.02, "bias \(bias): \(t)") }
        #expect(events.photos.map(\.exposureBias) == [-1, 0, 1, 2])
        #expect(controls.values["exposure_time_absolute"] == 100)
        #expect(controls.values["gain"] == 100)
        #expect(controls.values["auto_exposure"] == 0)
    }

    /// A test picture, the camera's JPEG of it (320x240, quality 70) and an MJPEG frame carrying it.
    func cameraJPEGFrame() throws -> (camera: [UInt8], frame: Frame, source: Frame) {
        let yuyv = Frame(capacity: format.maxByteCount, format: format)
        fillFrame(yuyv, index: 1)
        let enc = try JPEGEncoder()
        let camera = try withExtendedLifetime(enc) { Array(try enc.encode(yuyv, quality: 70)) }
        let mjpeg = FrameFormat(.mjpeg, width: 320, height: 240)
        let f = Frame(capacity: mjpeg.maxByteCount, format: mjpeg)
        camera.withUnsafeBytes { f.data.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
        f.bytesUsed = camera.count
        return (camera, f, yuyv)
    }

    /// A photo taken of the camera-JPEG frame carrying the engine's full-size decoded view (a
    /// test picture), which a stage changed or not.
    func photoOfMJPEGWithAView(_ settings: PhotoSettings, changed: Bool) throws -> (camera: [UInt8], photo: CapturePhoto) {
        let (camera, f, _) = try cameraJPEGFrame()
        let output = PhotoOutput()
        try output.start(configuration: config(f.format))
        let events = PhotoEvents()
        output.capture(settings: settings, delegate: events)
        let planar = FrameFormat(.yuv422p, width: 320, height: 240)
        let view = Frame(capacity: planar.maxByteCount, format: planar)
        fillFrame(view, index: 2)
        view.retain()
        f.setDecoded(view)
        f.pixelsModified = changed
        output.consume(f)
        return (camera, try #require(events.photos.first))
    }

    @Test("a camera JPEG a stage changed is encoded afresh, and the photo says so (not mjpeg-passthrough)")
    func aChangedMJPEGStillSaysItWasEncoded() throws {
        let photo = try photoOfMJPEGWithAView(PhotoSettings(codec: .jpeg(quality: 60, subsampling: nil)), changed: true).photo
        #expect(photo.resolvedSettings.codec == "jpeg" && photo.resolvedSettings.quality == 60 && photo.resolvedSettings.subsampling == .s422)
        let d = try photo.fileDataRepresentation().withUnsafeBytes { try JPEGDecoder().decodePlanes($0) }
        #expect(d.width == 320 && d.subsampling == .s422)
    }

    /// A camera JPEG no stage changed is stored as it came even when a full-size decoded view
    /// rides along (it was encoded again from the view, unlike the movie); a grey thumbnail asked
    /// for does not go into a colour JPEG passed through.
    @Test("an unchanged camera JPEG with a decoded view is passed through, its thumbnail in its own colours")
    func anUnchangedMJPEGWithAViewIsPassedThrough() throws {
        let (camera, photo) = try photoOfMJPEGWithAView(PhotoSettings(codec: .jpeg(quality: 60, subsampling: .grey), embeddedThumbnailSize: .exifThumbnail), changed: false)
        #expect(photo.resolvedSettings.codec == "mjpeg-passthrough")
        func scan(_ b: [UInt8]) throws -> ArraySlice<UInt8> {
            let sos = try b.withUnsafeBytes { try JPEGMarkers.segments($0) }.last!
            return b[sos.offset...]
        }
        #expect(try scan(photo.fileDataRepresentation()) == scan(camera))
        let thumb = try #require(photo.embeddedThumbnail)
        #expect(try thumb.withUnsafeBytes { try JPEGDecoder().header($0) }.subsampling == .s420)
    }

    @Test func mjpegStillIsPassedThroughWithExif() throws {
        let (camera, f, yuyv) = try cameraJPEGFrame()
        let output = PhotoOutput()
        try output.start(configuration: config(f.format))
        let events = PhotoEvents()
        output.capture(settings: PhotoSettings(), delegate: events)
        output.consume(f)
        let photo = try #require(events.photos.first)
        #expect(photo.resolvedSettings.codec == "mjpeg-passthrough")
        let out = photo.fileDataRepresentation()
        // The entropy-coded data is the camera's, byte for byte.
        func scan(_ b: [UInt8]) throws -> ArraySlice<UInt8> {
            let sos = try b.withUnsafeBytes { try JPEGMarkers.segments($0) }.last!
            return b[sos.offset...]
        }
        #expect(try scan(out) == scan(camera))
        #expect(try out.withUnsafeBytes { try JPEGMarkers.readExif($0) }.orientation == 1)
        #expect(try lumaPSNR(out, source: yuyv) > 30)
    }

    @Test func uvcFramesWithoutHuffmanTablesGetTheStandardOnes() throws {
        let yuyv = Frame(capacity: format.maxByteCount, format: format)
        fillFrame(yuyv, index: 2)
        let encoder = try JPEGEncoder()
        let full = try withExtendedLifetime(encoder) { Array(try encoder.encode(yuyv, quality: 80)) }
        // Remove the DHT segments, as UVC cameras send MJPEG.
        let segs = try full.withUnsafeBytes { try JPEGMarkers.segments($0) }
        var stripped: [UInt8] = [0xFF, 0xD8]
        for s in segs where s.marker != 0xC4 { stripped += s.marker == 0xDA ? full[s.offset...] : full[s.offset..<(s.offset + s.length)] }
        #expect(!(try stripped.withUnsafeBytes { try JPEGMarkers.segments($0) }).contains { $0.marker == 0xC4 })
        let fixed = try stripped.withUnsafeBytes { try JPEGMarkers.makeStandalone($0, exif: nil) }
        #expect(try lumaPSNR(fixed, source: yuyv) > 30)
    }

    @Test(arguments: [
        (PixelFormat.nv12, ChromaSubsampling?.none), (.i420, nil), (.yuv422p, nil), (.grey, nil), (.rgb24, .s444),
        (.yuyv, .s420), (.uyvy, .s444), (.nv12, .s422), (.yuyv, .grey),
    ])
    func encodesEveryFormat(_ pf: PixelFormat, _ sub: ChromaSubsampling?) throws {
        let f = FrameFormat(pf, width: 96, height: 64)
        let frame = Frame(capacity: f.maxByteCount, format: f)
        fillFrame(frame, index: 0, noise: 4)
        let encoder = try JPEGEncoder()
        let jpeg = try withExtendedLifetime(encoder) { Array(try encoder.encode(frame, quality: 95, subsampling: sub)) }
        let dec = try JPEGDecoder()
        let h = try jpeg.withUnsafeBytes { try dec.header($0) }
        #expect(h.width == 96 && h.height == 64)
        #expect(h.subsampling == JPEGEncoder.resolvedSubsampling(for: pf, requested: sub))
        if pf != .rgb24 { #expect(try lumaPSNR(jpeg, source: frame) > 30) }
    }

    @Test func badInputIsATypedError() throws {
        let f = FrameFormat(.yuyv, width: 64, height: 48)
        let frame = Frame(capacity: f.maxByteCount, format: f)
        frame.bytesUsed = 100
        #expect(throws: SinkError.corruptData("YUYV 64x48 frame has 100 bytes, needs 6144")) { _ = try JPEGEncoder().encode(frame, quality: 90) }
        #expect(throws: SinkError.self) { _ = try [UInt8](repeating: 7, count: 50).withUnsafeBytes { try JPEGMarkers.makeStandalone($0, exif: nil) } }
    }

    @Test func aCaptureWithoutFramesTimesOutAndIsWithdrawn() throws {
        let output = PhotoOutput()
        try output.start(configuration: config(format))
        #expect(throws: PhotoCaptureError.timedOut) { _ = try output.capturePhotos(settings: PhotoSettings(), timeoutSeconds: 0.1) }
        // A later frame does not revive it; a new capture works.
        let events = PhotoEvents()
        output.capture(settings: PhotoSettings(), delegate: events)
        let f = Frame(capacity: format.maxByteCount, format: format)
        fillFrame(f, index: 0)
        output.consume(f)
        #expect(events.calls == PhotoEvents.expected(1))
        #expect(events.finalError == nil)
        // Cancelling a capture in progress ends it at the next frame, with every callback.
        let controls = FakeExposureControls()
        output.bracketer = DeviceExposureBracketer(controls: controls)
        let bracket = PhotoSettings(exposureBiases: [-1, 1])
        let b = PhotoEvents()
        output.capture(settings: bracket, delegate: b)
        output.consume(f)
        output.cancel(uniqueID: bracket.uniqueID)
        output.consume(f)
        #expect(b.calls == PhotoEvents.expected(2))
        #expect(b.finalError == .cancelled)
        #expect(controls.values["exposure_time_absolute"] == 100)
    }
}
