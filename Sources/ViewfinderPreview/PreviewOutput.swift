import Hummingbird
import Synchronization
import Viewfinder
import ViewfinderKit

/// One preview picture: a JPEG, shared by every viewer (one buffer, never copied per client).
struct PreviewPicture: Sendable {
    let jpeg: ByteBuffer
    let sequence: UInt64
    /// When the frame was captured (monotonic ns): the viewer measures capture-to-preview latency.
    let captureNanoseconds: UInt64
    /// True when the camera's own MJPEG was passed through (no stage changed the pixels).
    let passedThrough: Bool
}

/// The values of one frame that the page charts (a few numbers, no allocation beyond the ring).
struct PreviewSample: Sendable, Equatable {
    var sequence: UInt64 = 0
    var exposureMicroseconds: Double?
    var gain: Double?
    var lensPosition: Double?
    var focusScore: Double?
    var exposureState: String?
    var focusState: String?
    var meteredLuma: Double?
    /// The metered spot as the user sees it (normalised), when the exposure stage meters a spot.
    var spotX: Double?
    var spotY: Double?
    /// Frame-to-frame motion, pixels.
    var motionX: Double?
    var motionY: Double?
    /// The stabiliser's raw camera path (accumulated motion) and its smoothed path (raw plus
    /// the correction applied), pixels.
    var rawPathX: Double = 0
    var rawPathY: Double = 0
    var smoothPathX: Double?
    var smoothPathY: Double?
}

/// The browser preview as a session output: it turns frames into small JPEGs for every viewer
/// of `/stream`, and keeps the per-frame values and a luma histogram that the statistics channel
/// sends.
///
/// Flow: the engine gives the output its own ring (2 frames, keep the newest) and thread, so
/// encoding never holds up capture or the other outputs. Each viewer has a one-picture mailbox:
/// a viewer whose connection has not taken the last picture when the next one is ready loses
/// the older one, counted as `client_late` (``viewerLateDrops``). A stalled browser therefore
/// costs one buffer, never a frame elsewhere. Nothing is encoded while nobody watches.
///
/// Pictures: camera MJPEG is passed through as it is when no stage changed the pixels; other
/// frames are scaled down by an integer factor to at most ``maximumWidth`` pixels wide and
/// encoded with TurboJPEG (4:2:0, ``quality``).
public final class PreviewOutput: CaptureOutput, @unchecked Sendable {
    // @unchecked Sendable: the encoder, scratch planes and path sums are confined to the output's
    // thread (start/consume/finish); everything other threads read is behind `shared` or in the
    // broadcaster and counters (locked or atomic).
    public let consumerName: String
    /// The widest preview picture, pixels (frames wider are scaled down by an integer factor).
    public let maximumWidth: Int
    /// JPEG quality of encoded preview pictures, 1–100.
    public let quality: Int
    public var ringCapacity: Int { 2 }
    public var discardsLateFrames: Bool { true }
    public var acceptedMediaTypes: Set<Viewfinder.MediaType> { [.video] }

    /// Pictures made (encoded or passed through) so far.
    public var pictureCount: UInt64 { counters.encoded.load(ordering: .relaxed) }
    /// Viewers connected to `/stream` now.
    public var viewerCount: Int { broadcaster.viewerCount }
    /// Pictures viewers lost because they had not taken the previous one yet, summed over viewers
    /// (the `client_late` drop reason).
    public var viewerLateDrops: UInt64 { counters.clientLate.load(ordering: .relaxed) }

    let broadcaster = PictureBroadcaster()
    let counters = PreviewCounters()

    struct Shared {
        var samples: [PreviewSample] = []
        var latest = PreviewSample()
        var histogram: [UInt32] = Array(repeating: 0, count: PreviewOutput.histogramBins)
        var frameSize = (width: 0, height: 0)
        var pixelFormat = ""
    }
    private let shared = LockedBox(Shared())
    private let connection = LockedBox<WeakPreviewConnection>(WeakPreviewConnection(nil))

    static let histogramBins = 64
    /// Samples kept between two reads of the statistics channel.
    static let sampleCapacity = 240

    private var encoder: JPEGEncoder?
    private var planes: UnsafeMutablePointer<UInt8>?
    private var planesCapacity = 0
    private var pathX = 0.0, pathY = 0.0
    private var lastHistogramTime: UInt64 = 0
    private let spotXKey = MetadataKey("ae.spot_x")
    private let spotYKey = MetadataKey("ae.spot_y")

    /// - Parameters:
    ///   - name: the output's name in statistics and metrics.
    ///   - maximumWidth: widest preview picture, pixels (at least 64).
    ///   - quality: JPEG quality of encoded pictures, 1–100.
    public init(name: String = "preview", maximumWidth: Int = 640, quality: Int = 75) {
        consumerName = name
        self.maximumWidth = max(64, maximumWidth)
        self.quality = min(100, max(1, quality))
    }

    public func sessionDidConnect(_ connection: CaptureConnection) {
        self.connection.withLock { $0 = WeakPreviewConnection(connection) }
    }

    public func sessionDidDisconnect(_ connection: CaptureConnection) {
        self.connection.withLock { if $0.connection === connection { $0 = WeakPreviewConnection(nil) } }
    }

    /// The connection's rotation (clockwise degrees) and mirroring: the picture is shown turned
    /// as the user sees it, as taps are mapped.
    func orientation() -> (rotation: Int, mirrored: Bool) {
        connection.withLock { c in c.connection.map { (($0.videoRotationAngle % 360 + 360) % 360, $0.isVideoMirrored) } ?? (0, false) }
    }

    /// The device's decoders (the session sets them when it starts): a turned or mirrored
    /// picture of a camera's JPEGs (or RGB, Bayer) is decoded here, on this output's thread and
    /// only while someone watches — reduced by TurboJPEG towards the preview's size — never by
    /// asking the engine to decode every frame for every output.
    public func setPixelDecoders(_ decoders: (any PixelDecoderFactory)?) { decodersBox.withLock { $0 = decoders } }
    private let decodersBox = LockedBox<(any PixelDecoderFactory)?>(nil)
    // The output's thread only.
    private var decoder: (any PixelDecoder)?
    private var decoderFormat: FrameFormat?
    private var decoded: Frame?

    /// The frame decoded here at the reduction nearest the preview's size (nil: no decoder).
    private func decodedHere(_ frame: Frame) throws -> Frame? {
        if decoderFormat != frame.format {
            decoder = decodersBox.withLock { $0 }?.makeDecoder(for: frame.format)
            decoderFormat = frame.format
            decoded = nil
        }
        guard let decoder else { return nil }
        let k = Self.previewSize(width: frame.format.width, height: frame.format.height, maximumWidth: maximumWidth).factor
        let scale = decoder.scaleDenominators.filter { $0 <= k }.max() ?? 1
        let need = decoder.decodedByteCount(for: frame.format, scale: scale)
        if decoded == nil || decoded!.capacity < need { decoded = Frame(capacity: need, format: frame.format) }
        try decoder.decode(frame, scale: scale, into: decoded!)
        return decoded
    }

    /// Maps a sensor point to the picture as the user sees it (the connection's rotation and
    /// mirroring); unchanged without a connection.
    func userPoint(_ p: NormalizedPoint) -> NormalizedPoint {
        connection.withLock { $0.connection?.userPoint(fromSensorPoint: p) ?? p }
    }

    /// Maps a point of the picture as the user sees it to sensor coordinates.
    func sensorPoint(_ p: NormalizedPoint) -> NormalizedPoint {
        connection.withLock { $0.connection?.sensorPoint(fromUserPoint: p) ?? p }
    }

    public func start(configuration: StreamConfiguration) throws {
        if encoder == nil { encoder = try JPEGEncoder() }
        pathX = 0; pathY = 0
        shared.withLock { s in
            s.frameSize = (configuration.format.width, configuration.format.height)
            s.pixelFormat = configuration.format.pixelFormat.rawValue
        }
    }

    public func consume(_ frame: Frame) {
        counters.frames.add(1, ordering: .relaxed)
        record(frame)
        if frame.metadata.droppedBefore > 0 { counters.engineLate.add(UInt64(frame.metadata.droppedBefore), ordering: .relaxed) }
        guard broadcaster.viewerCount > 0 else { return }
        do {
            guard let picture = try picture(of: frame) else {
                counters.unsupported.add(1, ordering: .relaxed)
                return
            }
            counters.encoded.add(1, ordering: .relaxed)
            let late = broadcaster.publish(picture)
            if late > 0 { counters.clientLate.add(UInt64(late), ordering: .relaxed) }
        } catch {
            counters.encodeFailed.add(1, ordering: .relaxed)
        }
    }

    public func finish(error: (any Error)?) {
        planes?.deallocate()
        planes = nil
        planesCapacity = 0
    }

    // MARK: Per-frame values

    private func record(_ frame: Frame) {
        let m = frame.metadata
        var s = PreviewSample()
        s.sequence = frame.sequence
        s.exposureMicroseconds = m.exposureTime ?? m.truth?.appliedExposure
        s.gain = m.gain ?? m.truth?.appliedGain
        s.lensPosition = m.lensPosition ?? m.truth?.appliedLensPosition
        s.focusScore = m.focus?.laplacianVariance
        s.exposureState = m.exposureState?.rawValue
        s.focusState = m.focusState?.rawValue
        s.meteredLuma = m.meteredLuma
        if let x = m.custom.value(spotXKey), let y = m.custom.value(spotYKey) {
            let u = userPoint(NormalizedPoint(x: x, y: y))
            s.spotX = u.x; s.spotY = u.y
        }
        if let mo = m.motion {
            s.motionX = mo.dx; s.motionY = mo.dy
            pathX += mo.dx; pathY += mo.dy
        }
        s.rawPathX = pathX; s.rawPathY = pathY
        if let c = m.correction { s.smoothPathX = pathX + c.dx; s.smoothPathY = pathY + c.dy }
        // A luma histogram about five times a second (every 16th pixel of every 8th row).
        var histogram: [UInt32]?
        let now = monotonicNanoseconds()
        if now &- lastHistogramTime > 200_000_000, let src = frame.pixelFrame, let luma = LumaSampler(src) {
            lastHistogramTime = now
            histogram = luma.histogram(bins: Self.histogramBins, stepX: 16, stepY: 8)
        }
        shared.withLock { sh in
            sh.latest = s
            if sh.samples.count >= Self.sampleCapacity { sh.samples.removeFirst(sh.samples.count - Self.sampleCapacity + 1) }
            sh.samples.append(s)
            if let histogram { sh.histogram = histogram }
        }
    }

    /// Takes the samples recorded since the last call, the newest sample and the histogram.
    func drainSamples() -> (samples: [PreviewSample], latest: PreviewSample, histogram: [UInt32], width: Int, height: Int, pixelFormat: String) {
        shared.withLock { sh in
            let out = sh.samples
            sh.samples.removeAll(keepingCapacity: true)
            return (out, sh.latest, sh.histogram, sh.frameSize.width, sh.frameSize.height, sh.pixelFormat)
        }
    }

    /// The newest frame's values.
    var latestSample: PreviewSample { shared.withLock { $0.latest } }

    // MARK: Pictures

    /// The frame as a preview JPEG; nil for a format with no picture to show.
    func picture(of frame: Frame) throws -> PreviewPicture? {
        let captured = frame.timestamp.clock == .monotonic && frame.timestamp.nanoseconds > 0 ? frame.timestamp.nanoseconds : frame.receiveTime
        let turn = orientation()
        let turned = turn.rotation != 0 || turn.mirrored
        if frame.format.pixelFormat == .mjpeg && !frame.pixelsModified && !turned {
            let buffer = ByteBuffer(bytes: UnsafeRawBufferPointer(start: frame.data, count: frame.bytesUsed))
            return PreviewPicture(jpeg: buffer, sequence: frame.sequence, captureNanoseconds: captured, passedThrough: true)
        }
        guard let encoder else { return nil }
        // The engine's decoded view when it has one at least the preview's size; else, to turn a
        // picture that has no YUV planes, one decoded here.
        var source = frame.pixelFrame
        if turned, !frame.format.pixelFormat.hasYUVPlanes,
           source == nil || source!.format.width < min(maximumWidth, frame.format.width) {
            source = try decodedHere(frame) ?? source
        }
        if let src = source, let scaled = scaleToI420(src, rotation: turn.rotation, mirrored: turn.mirrored) {
            let bytes = try encoder.encode(UnsafeRawPointer(scaled.data), byteCount: scaled.format.maxByteCount, format: scaled.format, quality: quality, subsampling: .s420)
            return PreviewPicture(jpeg: ByteBuffer(bytes: bytes), sequence: frame.sequence, captureNanoseconds: captured, passedThrough: false)
        }
        if frame.format.pixelFormat == .rgb24 || frame.format.pixelFormat == .bgr24 || frame.format.pixelFormat == .bgra {
            let bytes = try encoder.encode(frame, quality: quality, subsampling: .s420)
            return PreviewPicture(jpeg: ByteBuffer(bytes: bytes), sequence: frame.sequence, captureNanoseconds: captured, passedThrough: false)
        }
        return nil
    }

    /// The preview size for a frame: scaled down by the smallest integer factor that fits
    /// ``maximumWidth``, even sizes.
    static func previewSize(width: Int, height: Int, maximumWidth: Int) -> (width: Int, height: Int, factor: Int) {
        let k = max(1, (width + maximumWidth - 1) / maximumWidth)
        return (max(2, (width / k) & ~1), max(2, (height / k) & ~1), k)
    }

    /// Where pixel (ux, uy) of the turned picture (`rotation` clockwise, then `mirrored`) of a
    /// `w`×`h` picture lies in it — the pixel form of `CaptureConnection.sensorPoint`, as
    /// (x0, y0) at ux = 0 and the step per ux, for row `uy`.
    static func sensorRow(uy: Int, w: Int, h: Int, rotation: Int, mirrored: Bool) -> (x0: Int, y0: Int, dx: Int, dy: Int) {
        let uw = rotation == 90 || rotation == 270 ? h : w
        // ux' = mirrored ? uw - 1 - ux : ux, then the rotation's inverse, affine in ux.
        let (m0, m1) = mirrored ? (uw - 1, -1) : (0, 1)
        switch rotation {
        case 90: return (uy, h - 1 - m0, 0, -m1)
        case 180: return (w - 1 - m0, h - 1 - uy, -m1, 0)
        case 270: return (w - 1 - uy, m0, 0, m1)
        default: return (m0, uy, m1, 0)
        }
    }

    /// Point-samples the frame's YUV planes into I420 at the preview size, turned as the user
    /// sees it (in this output's scratch planes, valid until the next call).
    private func scaleToI420(_ src: Frame, rotation: Int = 0, mirrored: Bool = false) -> (data: UnsafeMutablePointer<UInt8>, format: FrameFormat)? {
        let f = src.format
        guard let sampler = YUVSampler(src) else { return nil }
        let (pw, ph, k) = Self.previewSize(width: f.width, height: f.height, maximumWidth: maximumWidth)
        let quarter = rotation == 90 || rotation == 270
        let (ow, oh) = quarter ? (ph, pw) : (pw, ph)
        let out = FrameFormat(.i420, width: ow, height: oh)
        let need = out.maxByteCount
        if need > planesCapacity {
            planes?.deallocate()
            planes = .allocate(capacity: need)
            planesCapacity = need
        }
        guard let p = planes else { return nil }
        let yPlane = out.plane(0), uPlane = out.plane(1), vPlane = out.plane(2)
        for y in 0..<oh {
            let row = p + yPlane.offset + y * yPlane.bytesPerRow
            // Unturned, the row is (x, y): the same loop serves every orientation.
            let r = Self.sensorRow(uy: y, w: pw, h: ph, rotation: rotation, mirrored: mirrored)
            for x in 0..<ow { row[x] = sampler.y((r.x0 + r.dx * x) * k, (r.y0 + r.dy * x) * k) }
        }
        for y in 0..<(oh / 2) {
            let ru = p + uPlane.offset + y * uPlane.bytesPerRow
            let rv = p + vPlane.offset + y * vPlane.bytesPerRow
            // The chroma of the user's pixel (2x, 2y), wherever it lies in the sensor's picture.
            let r = Self.sensorRow(uy: 2 * y, w: pw, h: ph, rotation: rotation, mirrored: mirrored)
            for x in 0..<(ow / 2) {
                let (u, v) = sampler.uv((r.x0 + r.dx * 2 * x) * k, (r.y0 + r.dy * 2 * x) * k)
                ru[x] = u; rv[x] = v
            }
        }
        return (p, out)
    }
}

/// A connection held without keeping it alive.
struct WeakPreviewConnection: Sendable {
    // The connection is Sendable (its state is locked); weak so the output never extends its life.
    weak var connection: CaptureConnection?
    init(_ c: CaptureConnection?) { connection = c }
}

/// The preview's own counts, lock-free.
final class PreviewCounters: Sendable {
    /// Frames that reached the output.
    let frames = Atomic<UInt64>(0)
    /// Pictures made (encoded or passed through).
    let encoded = Atomic<UInt64>(0)
    /// Pictures a viewer lost because it had not taken the previous one yet (summed over viewers).
    let clientLate = Atomic<UInt64>(0)
    /// Frames the engine dropped on the way to this output (its ring was full: the encoder was late).
    let engineLate = Atomic<UInt64>(0)
    /// Frames of a format the preview cannot show.
    let unsupported = Atomic<UInt64>(0)
    /// Frames whose encoding failed.
    let encodeFailed = Atomic<UInt64>(0)
    /// Pictures written to viewers' connections.
    let sent = Atomic<UInt64>(0)

    /// Drops by reason, for `/metrics` and the statistics channel.
    var drops: [(reason: String, count: UInt64)] {
        [("client_late", clientLate.load(ordering: .relaxed)), ("unsupported_format", unsupported.load(ordering: .relaxed)),
         ("encode_failed", encodeFailed.load(ordering: .relaxed))]
    }
}

/// Hands each picture to every viewer's one-picture mailbox.
final class PictureBroadcaster: Sendable {
    private let viewers = LockedBox<(open: [Int: AsyncStream<PreviewPicture>.Continuation], closed: Bool)>(([:], false))
    private let nextID = Atomic<Int>(0)
    private let count = Atomic<Int>(0)

    var viewerCount: Int { count.load(ordering: .relaxed) }

    /// A new viewer: its pictures (newest only) and a function to call when it leaves.
    func subscribe() -> (pictures: AsyncStream<PreviewPicture>, cancel: @Sendable () -> Void) {
        let id = nextID.add(1, ordering: .relaxed).newValue
        let (stream, continuation) = AsyncStream.makeStream(of: PreviewPicture.self, bufferingPolicy: .bufferingNewest(1))
        let added = viewers.withLock { v -> Bool in
            if v.closed { return false }
            v.open[id] = continuation
            return true
        }
        guard added else {
            continuation.finish()
            return (stream, {})
        }
        count.add(1, ordering: .relaxed)
        let cancel: @Sendable () -> Void = { [self] in
            let c = viewers.withLock { $0.open.removeValue(forKey: id) }
            if let c {
                count.subtract(1, ordering: .relaxed)
                c.finish()
            }
        }
        continuation.onTermination = { _ in cancel() }
        return (stream, cancel)
    }

    /// Offers the picture to every viewer; returns how many viewers lost an older picture to it.
    func publish(_ picture: PreviewPicture) -> Int {
        let all = viewers.withLock { Array($0.open.values) }
        var late = 0
        for c in all {
            if case .dropped = c.yield(picture) { late += 1 }
        }
        return late
    }

    /// Ends every viewer's stream and refuses new ones (the server is stopping).
    func finishAll() {
        let all = viewers.withLock { v -> [AsyncStream<PreviewPicture>.Continuation] in
            v.closed = true
            return Array(v.open.values)
        }
        for c in all { c.finish() }
    }
}

/// Reads Y, Cb and Cr of the YUV formats at a pixel position.
struct YUVSampler {
    private let data: UnsafePointer<UInt8>
    private let kind: PixelFormat
    private let p0: PlaneGeometry
    private let p1: PlaneGeometry?
    private let p2: PlaneGeometry?

    init?(_ frame: Frame) {
        let f = frame.format
        guard frame.capacity >= f.maxByteCount else { return nil }
        switch f.pixelFormat {
        case .yuyv, .uyvy, .nv12, .i420, .yuv422p, .grey: break
        default: return nil
        }
        data = UnsafePointer(frame.data.assumingMemoryBound(to: UInt8.self))
        kind = f.pixelFormat
        p0 = f.plane(0)
        p1 = f.planeCount > 1 ? f.plane(1) : nil
        p2 = f.planeCount > 2 ? f.plane(2) : nil
    }

    @inline(__always)
    func y(_ x: Int, _ y: Int) -> UInt8 {
        switch kind {
        case .yuyv: return data[p0.offset + y * p0.bytesPerRow + (x >> 1) * 4 + (x & 1) * 2]
        case .uyvy: return data[p0.offset + y * p0.bytesPerRow + (x >> 1) * 4 + 1 + (x & 1) * 2]
        default: return data[p0.offset + y * p0.bytesPerRow + x]
        }
    }

    @inline(__always)
    func uv(_ x: Int, _ y: Int) -> (UInt8, UInt8) {
        switch kind {
        case .yuyv:
            let b = p0.offset + y * p0.bytesPerRow + (x >> 1) * 4
            return (data[b + 1], data[b + 3])
        case .uyvy:
            let b = p0.offset + y * p0.bytesPerRow + (x >> 1) * 4
            return (data[b], data[b + 2])
        case .nv12:
            guard let c = p1 else { return (128, 128) }
            let b = c.offset + (y >> 1) * c.bytesPerRow + (x >> 1) * 2
            return (data[b], data[b + 1])
        case .i420:
            guard let u = p1, let v = p2 else { return (128, 128) }
            return (data[u.offset + (y >> 1) * u.bytesPerRow + (x >> 1)], data[v.offset + (y >> 1) * v.bytesPerRow + (x >> 1)])
        case .yuv422p:
            guard let u = p1, let v = p2 else { return (128, 128) }
            return (data[u.offset + y * u.bytesPerRow + (x >> 1)], data[v.offset + y * v.bytesPerRow + (x >> 1)])
        default:
            return (128, 128)
        }
    }
}

/// A luma histogram over a sample grid of a YUV frame.
struct LumaSampler {
    let sampler: YUVSampler
    let width: Int
    let height: Int

    init?(_ frame: Frame) {
        guard let s = YUVSampler(frame) else { return nil }
        sampler = s
        width = frame.format.width
        height = frame.format.height
    }

    func histogram(bins: Int, stepX: Int, stepY: Int) -> [UInt32] {
        var h = [UInt32](repeating: 0, count: bins)
        let shift = 256 / bins
        var y = 0
        while y < height {
            var x = 0
            while x < width {
                h[Int(sampler.y(x, y)) / shift] &+= 1
                x += stepX
            }
            y += stepY
        }
        return h
    }
}
