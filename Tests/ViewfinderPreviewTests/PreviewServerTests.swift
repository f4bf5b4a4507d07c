import CTurboJPEG
import Foundation
import Testing
import Viewfinder
@testable import ViewfinderKit
@testable import ViewfinderPreview
@testable import ViewfinderSinks

#if canImport(Glibc)
import Glibc
#endif

/// A preview server on the sim camera, listening on a free loopback port.
final class RunningPreview: @unchecked Sendable {
    // @unchecked Sendable: set up once in `start`, then only read.
    let session: CaptureSession
    let device: CaptureDevice
    let server: PreviewServer
    let folder: String
    var port = 0
    private var task: Task<Void, any Error>?

    init(sim: String = "sim:width=320,height=240,fps=30", token: String? = nil, stages: String? = nil, rotation: Int = 0,
         extraOutputs: [any CaptureOutput] = [], requestTimeout: Double = 10) throws {
        folder = NSTemporaryDirectory() + "vf-preview-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        device = try CaptureDevice.open(sim, directory: .standard)
        session = CaptureSession(registry: .builtIn)
        session.beginConfiguration()
        try session.addInput(CaptureDeviceInput(device: device))
        try session.setSessionPreset(.inputPriority)
        if let stages { try session.setStages(try StageSpec.parseList(stages)) }
        for o in extraOutputs { try session.addOutput(o) }
        try session.commitConfiguration()
        try device.configure { s in s.exposureMode = .continuous; s.focusMode = .continuous }
        var cfg = PreviewConfiguration()
        cfg.port = 0
        cfg.token = token
        cfg.outputDirectory = folder
        cfg.statisticsInterval = 0.1
        cfg.requestTimeout = requestTimeout
        server = try PreviewServer(session: session, device: device, configuration: cfg)
        for c in session.connections where c.mediaType == .video { try c.setVideoRotationAngle(rotation) }
    }

    func start() async throws {
        try session.startRunning()
        let portBox = LockedBox(0)
        let server = self.server
        task = Task { try await server.run { p in portBox.withLock { $0 = p } } }
        let deadline = monotonicNanoseconds() + 60_000_000_000
        while portBox.withLock({ $0 }) == 0 {
            guard monotonicNanoseconds() < deadline else { throw TestFailure("the server did not start listening within 60 s") }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        port = portBox.withLock { $0 }
    }

    func stop() async {
        task?.cancel()
        _ = await task?.result
        session.stopRunning()
        try? FileManager.default.removeItem(atPath: folder)
    }

    func url(_ path: String) -> String { "http://127.0.0.1:\(port)\(path)" }
}

struct TestFailure: Error, CustomStringConvertible {
    let description: String
    init(_ d: String) { description = d }
}

/// Runs `body`, failing after `seconds`.
func within<T: Sendable>(_ seconds: Double, _ what: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { g in
        g.addTask { try await body() }
        g.addTask { try await Task.sleep(nanoseconds: UInt64(seconds * 1e9)); return nil }
        defer { g.cancelAll() }
        guard let first = try await g.next(), let value = first else { throw TestFailure("\(what): no result within \(seconds) s") }
        return value
    }
}

/// A TCP connection to the test server on loopback, for requests the client above does not make
/// (another HTTP version, a body sent slowly); `recv` gives up after `receiveTimeout` seconds.
func rawConnection(port: Int, receiveTimeout: Double) throws -> Int32 {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TestFailure("socket failed") }
    let ok = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard ok == 0 else { close(fd); throw TestFailure("connect failed") }
    var tv = timeval(tv_sec: Int(receiveTimeout), tv_usec: Int((receiveTimeout - receiveTimeout.rounded(.down)) * 1e6))
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    return fd
}

enum Method: String { case GET, POST, PUT, DELETE, HEAD }

func request(_ url: String, method: Method = .GET, token: String? = nil, json: String? = nil, contentType: String = "application/json") -> LoopbackHTTP.Request {
    var r = LoopbackHTTP.Request(url: url, method: method.rawValue)
    if let token { r.headers.append((name: "Authorization", value: "Bearer \(token)")) }
    if let json {
        r.headers.append((name: "Content-Type", value: contentType))
        r.body = Array(json.utf8)
    }
    return r
}

/// Status and body of a short request.
func fetch(_ r: LoopbackHTTP.Request) async throws -> (status: UInt, body: String) {
    let response = try await LoopbackHTTP.execute(r, timeout: 10)
    let body = try await response.collect(upTo: 1 << 20)
    return (response.status, String(decoding: body, as: UTF8.self))
}

func jsonObject(_ s: String) throws -> [String: Any] {
    guard let o = try JSONSerialization.jsonObject(with: Data(s.utf8)) as? [String: Any] else { throw TestFailure("not a JSON object: \(s.prefix(200))") }
    return o
}

/// Splits an MJPEG (multipart/x-mixed-replace) byte stream into its JPEG parts.
struct MultipartReader {
    var pending: [UInt8] = []

    /// Adds bytes; returns the complete parts (JPEG bytes and the frame sequence header).
    mutating func add(_ bytes: [UInt8]) throws -> [(jpeg: [UInt8], sequence: UInt64)] {
        pending += bytes
        var out: [(jpeg: [UInt8], sequence: UInt64)] = []
        while let headerEnd = find([13, 10, 13, 10], in: pending) {
            let header = String(decoding: pending[0..<headerEnd], as: UTF8.self)
            guard header.hasPrefix("--\(PreviewServer.boundary)\r\n") else { throw TestFailure("part does not start with the boundary: \(header.prefix(80))") }
            var length = -1, sequence: UInt64 = 0
            for line in header.split(separator: "\r\n") {
                let parts = line.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard parts.count == 2 else { continue }
                if parts[0].lowercased() == "content-length" { length = Int(parts[1]) ?? -1 }
                if parts[0].lowercased() == "x-frame-sequence" { sequence = UInt64(parts[1]) ?? 0 }
            }
            guard length > 0 else { throw TestFailure("part without a Content-Length: \(header)") }
            let start = headerEnd + 4
            guard pending.count >= start + length + 2 else { break }
            out.append((Array(pending[start..<(start + length)]), sequence))
            pending.removeFirst(start + length + 2)
        }
        return out
    }
}

/// Where `needle` first occurs in `hay` (the multipart reader's and the HTTP client's delimiters).
func find(_ needle: [UInt8], in hay: [UInt8]) -> Int? {
    guard hay.count >= needle.count else { return nil }
    for i in 0...(hay.count - needle.count) where hay[i] == needle[0] && Array(hay[i..<(i + needle.count)]) == needle { return i }
    return nil
}

/// Decodes a JPEG to greyscale with TurboJPEG; throws if it does not decode.
func decodeJPEG(_ jpeg: [UInt8]) throws -> (width: Int, height: Int, luma: [UInt8]) {
    guard let h = tjInitDecompress() else { throw TestFailure("tjInitDecompress") }
    defer { tjDestroy(h) }
    var w: Int32 = 0, ht: Int32 = 0, sub: Int32 = 0, cs: Int32 = 0
    guard tjDecompressHeader3(h, jpeg, UInt(jpeg.count), &w, &ht, &sub, &cs) == 0, w > 0, ht > 0 else { throw TestFailure("not a JPEG header") }
    var out = [UInt8](repeating: 0, count: Int(w * ht))
    guard tjDecompress2(h, jpeg, UInt(jpeg.count), &out, w, 0, ht, Int32(TJPF_GRAY.rawValue), 0) == 0 else {
        throw TestFailure("JPEG does not decode: \(String(cString: tjGetErrorStr2(h)))")
    }
    return (Int(w), Int(ht), out)
}

/// Reads `count` pictures from `/stream`.
func readPictures(_ run: RunningPreview, count: Int, token: String? = nil) async throws -> (contentType: String, pictures: [(jpeg: [UInt8], sequence: UInt64)]) {
    let url = run.url("/stream") + (token.map { "?token=\($0)" } ?? "")
    return try await within(20, "\(count) pictures from /stream") {
        let response = try await LoopbackHTTP.execute(request(url), timeout: 10)
        guard response.status == 200 else { throw TestFailure("/stream answered \(response.status)") }
        var reader = MultipartReader()
        var pictures: [(jpeg: [UInt8], sequence: UInt64)] = []
        for try await chunk in response.body {
            pictures += try reader.add(chunk)
            if pictures.count >= count { break }
        }
        return (response.header("content-type") ?? "", Array(pictures.prefix(count)))
    }
}

/// Polls `/api/state` until `check` accepts it.
func waitForState(_ run: RunningPreview, token: String? = nil, seconds: Double = 10, _ what: String, _ check: @escaping @Sendable ([String: Any]) -> Bool) async throws -> [String: Any] {
    let url = run.url("/api/state")
    let deadline = monotonicNanoseconds() + UInt64(seconds * 1e9)
    var last = ""
    while monotonicNanoseconds() < deadline {
        let (status, body) = try await fetch(request(url, token: token))
        if status == 200, let o = try? jsonObject(body), check(o) { return o }
        last = body
        try await Task.sleep(nanoseconds: 50_000_000)
    }
    throw TestFailure("\(what): not seen within \(seconds) s; last state \(last.prefix(600))")
}

/// Records the metered spot that frames carry in their metadata (the exposure stage's
/// `ae.spot_x`/`ae.spot_y`, sensor coordinates).
final class SpotRecorder: CaptureOutput, @unchecked Sendable {
    // @unchecked Sendable: `spot` is locked.
    let consumerName = "spot-recorder"
    var acceptedMediaTypes: Set<Viewfinder.MediaType> { [.video] }
    let spot = LockedBox<NormalizedPoint?>(nil)
    let keyX = MetadataKey("ae.spot_x"), keyY = MetadataKey("ae.spot_y")
    func consume(_ frame: Frame) {
        if let x = frame.metadata.custom.value(keyX), let y = frame.metadata.custom.value(keyY) {
            spot.withLock { $0 = NormalizedPoint(x: x, y: y) }
        }
    }
}

@Suite(.serialized) struct PreviewServerTests {
    @Test func streamSendsDecodablePicturesThatChange() async throws {
        let run = try RunningPreview()
        try await run.start()
        let (type, pictures) = try await readPictures(run, count: 4)
        #expect(type.hasPrefix("multipart/x-mixed-replace; boundary=\(PreviewServer.boundary)"))
        #expect(pictures.count == 4)
        var lumas: [[UInt8]] = []
        for p in pictures {
            let d = try decodeJPEG(p.jpeg)
            #expect(d.width == 320 && d.height == 240, "a 320x240 frame is shown at its own size (under the 640 preview width)")
            lumas.append(d.luma)
        }
        #expect(zip(pictures, pictures.dropFirst()).allSatisfy { $0.0.sequence < $0.1.sequence }, "pictures come in capture order")
        #expect(lumas.first != lumas.last, "the picture changes (sensor noise, new frames)")
        await run.stop()
    }

    @Test func largeFramesAreScaledDownAndMJPEGPassesThrough() async throws {
        let yuyv = try RunningPreview(sim: "sim:width=1280,height=720,fps=15")
        try await yuyv.start()
        let scaled = try await readPictures(yuyv, count: 2)
        let d = try decodeJPEG(scaled.pictures[0].jpeg)
        #expect(d.width == 640 && d.height == 360, "1280x720 scaled by 2 to fit 640")
        await yuyv.stop()

        let mjpeg = try RunningPreview(sim: "sim:width=640,height=480,fps=15,format=mjpeg")
        try await mjpeg.start()
        let passed = try await readPictures(mjpeg, count: 2)
        let m = try decodeJPEG(passed.pictures[0].jpeg)
        #expect(m.width == 640 && m.height == 480)
        #expect(mjpeg.server.output.counters.encoded.load(ordering: .relaxed) > 0)
        await mjpeg.stop()
    }

    /// The picture is shown turned and mirrored as the connection says — as taps are mapped
    /// (2 Dec sweep: `preview --rotation 90` showed the sensor's picture while taps were mapped
    /// through the rotation, so a click metered elsewhere). Also on a camera's JPEGs (decoded
    /// then, not passed through).
    @Test func thePictureIsTurnedAsTapsAreMapped() async throws {
        let sim = "sim:width=320,height=240,fps=30,noise=0,shake=0,seed=5"
        func picture(_ device: String, rotation: Int, mirrored: Bool = false) async throws -> (width: Int, height: Int, luma: [UInt8]) {
            let run = try RunningPreview(sim: device, rotation: rotation)
            for c in run.session.connections where c.mediaType == .video { c.isVideoMirrored = mirrored }
            try await run.start()
            // The same picture in every run: once the exposure and focus loops have settled
            // (under AddressSanitizer the third picture came at another point of the loops).
            let got = try await readPictures(run, count: 30)
            await run.stop()
            return try decodeJPEG(got.pictures[29].jpeg)
        }
        let plain = try await picture(sim, rotation: 0)
        let (w, h) = (plain.width, plain.height)
        /// Mean difference between a turned picture and the plain one read through `source`.
        func difference(_ p: (width: Int, height: Int, luma: [UInt8]), _ source: (Int, Int) -> (Int, Int)) -> Double {
            var sum = 0
            for uy in 0..<p.height { for ux in 0..<p.width {
                let (sx, sy) = source(ux, uy)
                sum += abs(Int(p.luma[uy * p.width + ux]) - Int(plain.luma[sy * w + sx]))
            } }
            return Double(sum) / Double(p.width * p.height)
        }
        // Each turned picture matches the plain one read through its mapping — closely (JPEG's
        // own error) and far better than read straight (the picture has structure to tell).
        let quarter = try await picture(sim, rotation: 90)
        #expect(quarter.width == h && quarter.height == w)
        #expect(difference(quarter) { ux, uy in (uy, h - 1 - ux) } < 6)
        let half = try await picture(sim, rotation: 180)
        let halfMapped = difference(half) { ux, uy in (w - 1 - ux, h - 1 - uy) }, halfStraight = difference(half) { ux, uy in (ux, uy) }
        #expect(halfMapped < 6 && halfMapped < halfStraight / 3, "\(halfMapped) against \(halfStraight) unturned")
        let mirrored = try await picture(sim, rotation: 0, mirrored: true)
        let mirroredMapped = difference(mirrored) { ux, uy in (w - 1 - ux, uy) }, mirroredStraight = difference(mirrored) { ux, uy in (ux, uy) }
        #expect(mirroredMapped < 6 && mirroredMapped < mirroredStraight / 3, "\(mirroredMapped) against \(mirroredStraight) unturned")
        let both = try await picture(sim, rotation: 270, mirrored: true)
        #expect(both.width == h && both.height == w)
        // Mirrored after the turn: the user's x runs backwards, then 270° turns it back.
        #expect(difference(both) { ux, uy in (w - 1 - uy, h - 1 - ux) } < 6)
        let jpeg = try await picture("sim:width=320,height=240,fps=30,format=mjpeg,noise=0,shake=0,seed=5", rotation: 90)
        #expect(jpeg.width == h && jpeg.height == w)
    }

    /// A recording that ends on its own with an error (a full disk) is said — on the page, in
    /// `/api/state`, on standard error — and one that could write no frame leaves no file (2 Dec
    /// sweep: the state went quiet and a 675-byte movie with no frame was left).
    @Test func aRecordingThatEndsOnItsOwnIsSaidAndAnEmptyOneLeavesNoFile() async throws {
        let run = try RunningPreview()
        let controls = run.server.controls
        for frames in [0, 12] {
            let path = run.folder + "/movie-\(frames).mov"
            #expect(FileManager.default.createFile(atPath: path, contents: Data([0, 0, 0, 8])))
            let summary = MovieRecordingSummary(path: path, frames: frames, preRollFrames: 0, duration: Double(frames) / 30, bytes: 4,
                                                droppedFrames: 0, reason: .diskFull, successfullyFinished: frames > 0)
            controls.recordingEnded(path: path, summary: summary, error: .diskFull(path: path))
            let said = try #require(controls.lastRecordingError)
            #expect(said.contains("is full"), "\(said)")
            #expect(FileManager.default.fileExists(atPath: path) == (frames > 0), "\(frames) frames: \(said)")
        }
        try await run.start()
        let state = try await fetch(request(run.url("/api/state"))).body
        #expect(state.contains(#""recording_error":"recording movie-12.mov ended"#), "\(state.prefix(300))")
        await run.stop()
    }

    @Test func eventsCarryLiveStatistics() async throws {
        let run = try RunningPreview(stages: "stabilise")
        try await run.start()
        let url = run.url("/events")
        let texts: [String] = try await within(20, "statistics over /events") {
            let response = try await LoopbackHTTP.execute(request(url), timeout: 10)
            guard response.header("content-type") == "text/event-stream" else { throw TestFailure("content type \(response.headers)") }
            var text = "", out: [String] = []
            for try await chunk in response.body {
                text += String(decoding: chunk, as: UTF8.self)
                while let r = text.range(of: "\n\n") {
                    let event = String(text[..<r.lowerBound]); text.removeSubrange(..<r.upperBound)
                    if let line = event.split(separator: "\n").first(where: { $0.hasPrefix("data: ") }) { out.append(String(line.dropFirst(6))) }
                }
                let samples = out.compactMap { try? jsonObject($0)["samples"] as? [Any] }.reduce(0) { $0 + $1.count }
                if out.count >= 8 && samples > 10 { break }
            }
            return out
        }
        let messages = try texts.map { try jsonObject($0) }
        let last = try #require(messages.last)
        #expect((last["captured"] as? Int ?? 0) > 0)
        #expect((last["fps"] as? Double ?? 0) > 5, "the sim runs at 30 fps")
        #expect(last["exposure_us"] is Double && last["gain"] is Double && last["lens"] is Double)
        #expect(last["ae_state"] is String)
        let stages = try #require(last["stages"] as? [[String: Any]])
        #expect(stages.contains { ($0["name"] as? String) == "stabilise" }, "per-stage time: \(stages)")
        let hist = try #require(last["histogram"] as? [Int])
        #expect(hist.count == 64 && hist.reduce(0, +) > 0)
        #expect(last["latency_ms"] is [String: Any] && last["drops"] is [String: Any])
        let samples = messages.flatMap { ($0["samples"] as? [[String: Any]]) ?? [] }
        #expect(samples.count > 10, "every frame's values reach the charts")
        #expect(samples.contains { $0["smooth_x"] is Double }, "the stabiliser's smoothed path is charted")
        #expect(last["motion"] is [String: Any])
        await run.stop()
    }

    @Test func tapMovesTheMeteredSpotThroughRotation() async throws {
        let recorder = SpotRecorder()
        let run = try RunningPreview(rotation: 90, extraOutputs: [recorder])
        try await run.start()
        for (x, y) in [(0.2, 0.3), (0.75, 0.6)] {
            let (status, body) = try await fetch(request(run.url("/api/point"), method: .POST, json: #"{"x": \#(x), "y": \#(y)}"#))
            #expect(status == 200, "\(body)")
            // The frames' metadata carries the spot in sensor coordinates: the tap mapped through
            // the 90° rotation.
            let sensor = CaptureConnection.sensorPoint(fromUserPoint: NormalizedPoint(x: x, y: y), rotation: 90, mirrored: false)
            let deadline = monotonicNanoseconds() + 10_000_000_000
            while monotonicNanoseconds() < deadline {
                if let s = recorder.spot.withLock({ $0 }), abs(s.x - sensor.x) < 1e-9, abs(s.y - sensor.y) < 1e-9 { break }
                try await Task.sleep(nanoseconds: 20_000_000)
            }
            let seen = recorder.spot.withLock { $0 }
            #expect(seen.map { abs($0.x - sensor.x) < 1e-9 && abs($0.y - sensor.y) < 1e-9 } == true, "metadata spot \(String(describing: seen)), expected sensor \(sensor)")
            // The statistics show it where the user tapped.
            _ = try await waitForState(run, "spot at the tap (\(x), \(y))") { o in
                guard let s = o["spot"] as? [String: Double], let sx = s["x"], let sy = s["y"] else { return false }
                return abs(sx - x) < 1e-9 && abs(sy - y) < 1e-9
            }
        }
        #expect(run.device.settings.exposureMode == .continuous)
        await run.stop()
    }

    /// HEAD of every GET path: GET's status and headers, its Content-Length (a stream: none), no
    /// body. (HEAD / and /metrics said Content-Length 0; the other paths were 404.)
    @Test func headAnswersAsGetWithoutTheBody() async throws {
        let run = try RunningPreview(stages: "null")
        try await run.start()
        for path in ["/", "/metrics", "/api/state"] {
            let get = try await LoopbackHTTP.execute(request(run.url(path)), timeout: 10)
            let body = try await get.collect(upTo: 1 << 20)
            let head = try await LoopbackHTTP.execute(request(run.url(path), method: .HEAD), timeout: 10)
            #expect(head.status == 200, "\(path)")
            #expect(head.header("Content-Type") == get.header("Content-Type"), "\(path)")
            let length = try #require(head.header("Content-Length").flatMap(Int.init), "\(path)")
            // The page is the same bytes; the metrics and state change between two requests.
            if path == "/" { #expect(length == body.count) } else { #expect(length > 0 && abs(length - body.count) < body.count / 2, "\(path): \(length) vs \(body.count)") }
        }
        for path in ["/stream", "/events"] {
            let head = try await LoopbackHTTP.execute(request(run.url(path), method: .HEAD), timeout: 10)
            #expect(head.status == 200, "\(path)")
            #expect(head.header("Content-Length") == nil, "\(path)")
            #expect(head.header("Content-Type")?.hasPrefix(path == "/stream" ? "multipart/x-mixed-replace" : "text/event-stream") == true, "\(path)")
        }
        #expect(run.server.output.broadcaster.viewerCount == 0 && run.server.hub.subscriberCount == 0, "a HEAD of a stream subscribes no viewer")
        await run.stop()
    }

    /// An HTTP/1.0 request is answered as HTTP/1.0: no chunked coding (which HTTP/1.0 does not
    /// have: the MJPEG and event streams' bytes came with chunk sizes in them), and the connection
    /// closed after the response (it stayed open until the idle timeout for a client reading to
    /// the end).
    @Test func anHTTP10RequestGetsAnHTTP10Answer() async throws {
        let run = try RunningPreview(stages: "null")
        try await run.start()
        let port = run.port
        /// Sends `request` and reads until the server closes or `limit` bytes came; the bytes and
        /// whether the server closed, and when.
        @Sendable func exchange(_ request: String, limit: Int) throws -> (text: String, bytes: [UInt8], closedAfter: Double?) {
            let fd = try rawConnection(port: port, receiveTimeout: 15)
            defer { close(fd) }
            _ = request.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            let t0 = monotonicNanoseconds()
            var got: [UInt8] = []
            var buf = [UInt8](repeating: 0, count: 65536)
            while got.count < limit {
                let n = recv(fd, &buf, buf.count, 0)
                if n == 0 { return (String(decoding: got, as: UTF8.self), got, Double(monotonicNanoseconds() - t0) / 1e9) }
                if n < 0 { break }
                got += buf[0..<n]
            }
            return (String(decoding: got, as: UTF8.self), got, nil)
        }
        let metrics = try await within(20, "HTTP/1.0 metrics") { try exchange("GET /metrics HTTP/1.0\r\nHost: 127.0.0.1:\(port)\r\n\r\n", limit: 1 << 22) }
        #expect(metrics.text.hasPrefix("HTTP/1.0 200"), "\(metrics.text.prefix(120))")
        #expect(metrics.text.lowercased().contains("content-length:"))
        #expect(!metrics.text.lowercased().contains("transfer-encoding"))
        let closed = try #require(metrics.closedAfter, "the server closed the connection after the response")
        #expect(closed < 3, "closed after \(closed) s")
        let stream = try await within(20, "HTTP/1.0 stream") { try exchange("GET /stream HTTP/1.0\r\nHost: 127.0.0.1:\(port)\r\n\r\n", limit: 20_000) }
        #expect(stream.text.hasPrefix("HTTP/1.0 200"), "\(stream.text.prefix(120))")
        let headEnd = try #require(stream.text.range(of: "\r\n\r\n"))
        let head = stream.text[..<headEnd.lowerBound].lowercased()
        #expect(!head.contains("transfer-encoding"), "\(head)")
        #expect(stream.text[headEnd.upperBound...].hasPrefix("--\(PreviewServer.boundary)\r\n"), "the body is the multipart stream itself, no chunk sizes")
        // HTTP/1.1 is as it was: a stream is chunked.
        let eleven = try await within(20, "HTTP/1.1 stream") { try exchange("GET /stream HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\r\n", limit: 4000) }
        #expect(eleven.text.hasPrefix("HTTP/1.1 200") && eleven.text.lowercased().contains("transfer-encoding: chunked"))
        await run.stop()
    }

    /// A request whose body trickles in is cut off when it is not whole within the request
    /// timeout (the idle timeout alone let a byte every few seconds hold the connection).
    @Test func aBodySentTooSlowlyIsCutOff() async throws {
        let run = try RunningPreview(stages: "null", requestTimeout: 1)
        try await run.start()
        let port = run.port
        let (status, closedAfter) = try await within(20, "slow body") { () -> (String, Double) in
            let fd = try rawConnection(port: port, receiveTimeout: 0.3)
            defer { close(fd) }
            let head = "POST /api/point HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
            _ = head.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            let t0 = monotonicNanoseconds()
            var received: [UInt8] = []
            var buf = [UInt8](repeating: 0, count: 4096)
            // One byte every 0.3 s (the idle timeout never fires), reading what comes back.
            for _ in 0..<40 {
                _ = send(fd, " ", 1, Int32(MSG_NOSIGNAL))
                let n = recv(fd, &buf, buf.count, 0)
                if n > 0 { received += buf[0..<n] }
                if n == 0 { return (String(decoding: received, as: UTF8.self), Double(monotonicNanoseconds() - t0) / 1e9) }
            }
            return (String(decoding: received, as: UTF8.self), -1)
        }
        #expect(status.hasPrefix("HTTP/1.1 408"), "\(status.prefix(200))")
        #expect(closedAfter > 0.5 && closedAfter < 6, "closed after \(closedAfter) s")
        // The server goes on serving.
        #expect(try await fetch(request(run.url("/api/state"))).status == 200)
        await run.stop()
    }

    @Test func controlsAreValidated() async throws {
        let run = try RunningPreview(stages: "null")
        try await run.start()
        let point = run.url("/api/point")
        #expect(try await fetch(request(point, method: .POST, json: #"{"x": 1.5, "y": 0.2}"#)).status == 400)
        #expect(try await fetch(request(point, method: .POST, json: #"{"x": -0.1, "y": 0.2}"#)).status == 400)
        #expect(try await fetch(request(point, method: .POST, json: #"{"x": "left"}"#)).status == 400)
        // A key given twice is refused, not read as one of the two (3 Dec).
        let twice = try await fetch(request(point, method: .POST, json: #"{"x": 0.5, "y": 0.5, "x": 2}"#))
        #expect(twice.status == 400 && twice.body.contains("'x' is given twice"), "\(twice.body)")
        let tiny = try await fetch(request(point, method: .POST, json: #"{"x": 1e-400, "y": 0}"#))
        // Valid JSON that no Double holds (the decoder said only "not valid JSON").
        #expect(tiny.status == 400 && tiny.body.contains("'x' is a number out of range (1e-400)"), "\(tiny.body)")
        // A body that takes no fields is an object, not any JSON.
        #expect(try await fetch(request(run.url("/api/still"), method: .POST, json: "[]")).status == 400)
        #expect(try await fetch(request(point, method: .POST, json: "x=0.5&y=0.5", contentType: "application/x-www-form-urlencoded")).status == 415)
        #expect(try await fetch(request(point, method: .POST, json: String(repeating: " ", count: 8000) + "{}")).status == 413)
        // A body announced as 1 TB is refused at once, before the server waits for any of it (the
        // client sends 2 bytes and waits: a server reading the body first would time out here).
        var huge = request(point, method: .POST, json: "{}")
        huge.announcedLength = 1 << 40
        #expect(try await LoopbackHTTP.execute(huge, timeout: 5).status == 413)
        #expect(try await fetch(request(run.url("/api/point"))).status != 200, "controls are POST only")
        // A known path with another method is 405, not 404 (which says the path does not exist).
        let wrongMethod = try await fetch(request(run.url("/api/point")))
        #expect(wrongMethod.status == 405)
        // As JSON, like the API's other errors.
        #expect(((try? jsonObject(wrongMethod.body))?["error"] as? [String: Any])?["message"] as? String == "/api/point takes POST, not GET", "\(wrongMethod.body)")
        #expect(try await fetch(request(run.url("/api/still"), method: .PUT, json: "{}")).status == 405)
        #expect(try await fetch(request(run.url("/metrics"), method: .POST, json: "{}")).status == 405)
        #expect(try await fetch(request(run.url("/api/nope"))).status == 404)
        let unknown = try await fetch(request(run.url("/api/stage"), method: .POST, json: #"{"name": "../../etc", "enabled": false}"#))
        #expect(unknown.status == 400 && unknown.body.contains("unknown stage"))
        let off = try await fetch(request(run.url("/api/stage"), method: .POST, json: #"{"name": "null", "enabled": false}"#))
        #expect(off.status == 200 && off.body.contains(#""enabled":false"#), "\(off.body)")
        #expect(run.session.stages.first?.enabled == false)
        // A still and a recording land in the output folder under names the server chose.
        let still = try await fetch(request(run.url("/api/still"), method: .POST, json: "{}"))
        #expect(still.status == 200, "\(still.body)")
        let stillName = try #require(try jsonObject(still.body)["file"] as? String)
        #expect(stillName.hasPrefix("still-") && stillName.hasSuffix(".jpg") && !stillName.contains("/"))
        let stillBytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: run.folder + "/" + stillName)))
        #expect(try decodeJPEG(stillBytes).width == 320)
        let start = try await fetch(request(run.url("/api/record"), method: .POST, json: #"{"recording": true}"#))
        #expect(start.status == 200, "\(start.body)")
        #expect(try await fetch(request(run.url("/api/record"), method: .POST, json: #"{"recording": true}"#)).status == 409)
        // A stage switch would restart the session and end the recording: refused while it runs.
        let during = try await fetch(request(run.url("/api/stage"), method: .POST, json: #"{"name": "null", "enabled": true}"#))
        #expect(during.status == 409 && during.body.contains("stop recording first"), "\(during.body)")
        #expect(run.session.stages.first?.enabled == false && run.server.movie.isRecording)
        try await Task.sleep(nanoseconds: 700_000_000)
        let stop = try await fetch(request(run.url("/api/record"), method: .POST, json: #"{"recording": false}"#))
        #expect(stop.status == 200, "\(stop.body)")
        let movieName = try #require(try jsonObject(stop.body)["file"] as? String)
        #expect(movieName.hasPrefix("movie-") && movieName.hasSuffix(".mov"))
        let deadline = monotonicNanoseconds() + 5_000_000_000
        while run.server.movie.isRecording && monotonicNanoseconds() < deadline { try await Task.sleep(nanoseconds: 20_000_000) }
        let size = (try? FileManager.default.attributesOfItem(atPath: run.folder + "/" + movieName)[.size] as? Int) ?? 0
        #expect(size > 10_000, "the recording has frames (\(size) bytes)")
        // The reply came once the file was finished: its size is the file's on disk.
        #expect(try jsonObject(stop.body)["bytes"] as? Int == size, "\(stop.body) against \(size) bytes on disk")
        await run.stop()
    }

    @Test func tokenGuardsEverythingButThePage() async throws {
        let token = "s3cret-token_1"
        let run = try RunningPreview(token: token)
        try await run.start()
        for path in ["/stream", "/events", "/metrics", "/api/state"] {
            #expect(try await fetch(request(run.url(path))).status == 401, "\(path) without the token")
            #expect(try await fetch(request(run.url(path + "?token=wrong-token"))).status == 401, "\(path) with a wrong token")
        }
        #expect(try await fetch(request(run.url("/api/point"), method: .POST, json: #"{"x": 0.5, "y": 0.5}"#)).status == 401)
        #expect(try await fetch(request(run.url("/api/point"), method: .POST, token: "s3cret-token_2", json: #"{"x": 0.5, "y": 0.5}"#)).status == 401)
        let page = try await fetch(request(run.url("/")))
        #expect(page.status == 200 && page.body.contains("<canvas"), "the page itself needs no token")
        #expect(try await fetch(request(run.url("/metrics"), token: token)).status == 200)
        // The scheme's name in any case (RFC 9110): curl users write "bearer".
        var lower = request(run.url("/metrics"))
        lower.headers.append((name: "Authorization", value: "bearer \(token)"))
        #expect(try await fetch(lower).status == 200)
        #expect(try await fetch(request(run.url("/api/state?token=\(token)"))).status == 200)
        #expect(try await fetch(request(run.url("/api/point"), method: .POST, token: token, json: #"{"x": 0.5, "y": 0.5}"#)).status == 200)
        let pictures = try await readPictures(run, count: 1, token: token)
        #expect(pictures.pictures.count == 1)
        await run.stop()
    }

    /// Without a token, only this machine's loopback names and pages are answered (2 Dec sweep:
    /// `Host: attacker.example` and a foreign `Origin` were accepted — what a DNS-rebinding page
    /// sends).
    @Test func aLoopbackServerAnswersOnlyItsOwnHostAndOrigin() async throws {
        let run = try RunningPreview()
        try await run.start()
        func status(host: String? = nil, origin: String? = nil, post: Bool = false) async throws -> UInt {
            var r = post ? request(run.url("/api/point"), method: .POST, json: #"{"x": 0.5, "y": 0.5}"#) : request(run.url("/api/state"))
            if let host { r.headers.append((name: "Host", value: host)) }
            if let origin { r.headers.append((name: "Origin", value: origin)) }
            return try await fetch(r).status
        }
        #expect(try await status() == 200)
        #expect(try await status(host: "localhost:\(run.port)") == 200)
        #expect(try await status(host: "attacker.example:\(run.port)") == 403)
        // A name that begins like a loopback address is still a name (2 Dec review).
        #expect(try await status(host: "127.evil.example:\(run.port)") == 403)
        #expect(try await status(host: "127.0.0.2:\(run.port)") == 200)
        #expect(try await status(origin: "http://127.0.0.1:\(run.port)", post: true) == 200)
        #expect(try await status(origin: "http://attacker.example:\(run.port)", post: true) == 403)
        #expect(try await status(host: "attacker.example", origin: "http://attacker.example", post: true) == 403)
        // An absolute-form target names the host that counts (RFC 9112 §3.2.2), whatever Host says.
        let port = run.port
        @Sendable func statusLine(_ target: String) throws -> String {
            let fd = try rawConnection(port: port, receiveTimeout: 15)
            defer { close(fd) }
            let text = "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n"
            _ = text.withCString { send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
            var buf = [UInt8](repeating: 0, count: 256)
            let n = recv(fd, &buf, buf.count, 0)
            return n > 0 ? String(decoding: buf[0..<n], as: UTF8.self).components(separatedBy: "\r\n")[0] : ""
        }
        let foreign = try await within(20, "absolute-form target") { try statusLine("http://attacker.example/metrics") }
        #expect(foreign.hasPrefix("HTTP/1.1 403"), "\(foreign)")
        let own = try await within(20, "absolute-form loopback target") { try statusLine("http://127.0.0.1:\(port)/metrics") }
        #expect(own.hasPrefix("HTTP/1.1 200"), "\(own)")
        await run.stop()
    }

    /// A pipeline with its own exposure and focus stages keeps them in charge: a tap does not
    /// start the device's own loops beside them (2 Dec sweep: with `exposure:mode=continuous`
    /// a tap made two loops fight, exposure hunting between 10 and 33 ms), and says so.
    @Test func aTapLeavesThePipelinesOwnLoopsInCharge() async throws {
        let both = try RunningPreview(stages: "exposure:mode=continuous,focus:mode=continuous")
        try await both.start()
        let refused = try await fetch(request(both.url("/api/point"), method: .POST, json: #"{"x": 0.1, "y": 0.9}"#))
        #expect(refused.status == 409 && refused.body.contains("pipeline's own exposure and focus"), "\(refused.body)")
        await both.stop()
        let exposureOnly = try RunningPreview(stages: "exposure:mode=continuous")
        try await exposureOnly.start()
        try exposureOnly.device.configure { $0.exposureMode = .locked }
        let focusOnly = try await fetch(request(exposureOnly.url("/api/point"), method: .POST, json: #"{"x": 0.1, "y": 0.9}"#))
        #expect(focusOnly.status == 200 && focusOnly.body.contains(#""exposure":false"#) && focusOnly.body.contains(#""focus":true"#), "\(focusOnly.body)")
        #expect(exposureOnly.device.settings.exposureMode == .locked)
        await exposureOnly.stop()
    }

    @Test func anAddressOtherThanLoopbackNeedsAToken() throws {
        let session = CaptureSession(registry: .builtIn)
        let device = try CaptureDevice.open("sim:width=64,height=64", directory: .standard)
        var cfg = PreviewConfiguration()
        cfg.host = "0.0.0.0"
        #expect(throws: PreviewError.tokenRequired(host: "0.0.0.0")) { try PreviewServer(session: session, device: device, configuration: cfg) }
        cfg.token = "short"
        #expect(throws: PreviewError.invalidToken) { try PreviewServer(session: session, device: device, configuration: cfg) }
        cfg.token = "a-good-token"
        cfg.outputDirectory = "/nonexistent-folder-vf"
        #expect(throws: PreviewError.outputDirectory(path: "/nonexistent-folder-vf")) { try PreviewServer(session: session, device: device, configuration: cfg) }
        #expect(PreviewConfiguration.generateToken().count == 32)
        #expect(PreviewConfiguration.isLoopback("127.0.0.1") && PreviewConfiguration.isLoopback("::1") && !PreviewConfiguration.isLoopback("192.168.1.2"))
        #expect(!PreviewConfiguration.isLoopback("127.evil.example") && !PreviewConfiguration.isLoopback("127.0.0.1.example.com"))
    }

    @Test func metricsUsePrometheusNames() async throws {
        let run = try RunningPreview(stages: "stabilise")
        try await run.start()
        _ = try await readPictures(run, count: 3)
        let (status, text) = try await fetch(request(run.url("/metrics")))
        #expect(status == 200)
        #expect(text.contains("# TYPE viewfinder_frames_captured_total counter"))
        #expect(text.contains("# TYPE viewfinder_frames_delivered_total counter"))
        #expect(text.contains(#"viewfinder_frames_dropped_total{reason="late"}"#))
        #expect(text.contains(#"viewfinder_stage_time_seconds{stage="stabilise"}"#))
        #expect(text.contains(#"viewfinder_latency_seconds{quantile="0.5"}"#))
        #expect(text.contains("viewfinder_preview_latency_seconds_bucket"))
        #expect(text.contains(#"viewfinder_preview_frames_dropped_total{reason="client_late"}"#))
        func capturedTotal(_ text: String) -> Double {
            let line = text.split(separator: "\n").first { $0.hasPrefix("viewfinder_frames_captured_total ") }
            return line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
        }
        let value = capturedTotal(text)
        #expect(value > 0, "captured frames counted")
        // A stage switch restarts the session: the counters go on from where they were (2 Dec
        // sweep: 418 → 60), and the switched-off stage's time is gone (it stayed frozen).
        let off = try await fetch(request(run.url("/api/stage"), method: .POST, json: #"{"name": "stabilise", "enabled": false}"#))
        #expect(off.status == 200, "\(off.body)")
        _ = try await readPictures(run, count: 3)
        let after = try await fetch(request(run.url("/metrics"))).body
        #expect(capturedTotal(after) > value, "\(capturedTotal(after)) after \(value)")
        #expect(!after.contains(#"viewfinder_stage_time_seconds{stage="stabilise"}"#))
        await run.stop()
    }

    /// The counters and the preview's totals go on across a stage switch that no scrape saw
    /// (2 Dec, third session, sweep: `/metrics` fell from ~110 to 1 after a switch that came
    /// before the first scrape, and the exit summary counted the last run only).
    @Test func countsGoOnAcrossASwitchNoScrapeSaw() async throws {
        let run = try RunningPreview(stages: "null")
        try await run.start()
        _ = try await readPictures(run, count: 15)
        let before = run.server.totals.captured
        #expect(before >= 15)
        let off = try await fetch(request(run.url("/api/stage"), method: .POST, json: #"{"name": "null", "enabled": false}"#))
        #expect(off.status == 200, "\(off.body)")
        _ = try await readPictures(run, count: 3)
        let text = try await fetch(request(run.url("/metrics"))).body
        let line = text.split(separator: "\n").first { $0.hasPrefix("viewfinder_frames_captured_total ") }
        let scraped = line.flatMap { Double($0.split(separator: " ").last ?? "") } ?? 0
        #expect(scraped > Double(before), "\(scraped) after \(before) before the switch")
        #expect(run.server.totals.captured >= UInt64(scraped))
        await run.stop()
    }

    /// A camera that drops out and comes back many times: the metrics keep the newest runs and a
    /// sum of the rest (they kept every run's statistics for ever), and still count every run.
    @Test func manyRunsAreSummedNotKept() {
        let metrics = PreviewMetrics()
        var runs: [EngineStatistics] = []
        for i in 0..<50 {
            let s = EngineStatistics(stageNames: [], consumerNames: ["preview", i % 2 == 0 ? "movie" : "dump"])
            s.countCaptured(UInt64(i + 1))
            for _ in 0..<i { s.countDelivered() }
            s.drops.count(.late, 2)
            s.consumers[0].countConsumed()
            s.consumers[1].drops.count(.storageBacklog)
            metrics.runStarted(s)
            metrics.runStarted(s)   // told twice: counted once
            runs.append(s)
        }
        #expect(metrics.keptRuns == PreviewMetrics.liveRuns)
        let t = metrics.totals()
        #expect(t.captured == runs.reduce(0) { $0 + $1.captured } && t.captured == 1275)
        #expect(t.delivered == 1225 && t.dropped == 100)
        // Per output, over the folded runs and the kept ones alike.
        let (sums, newest) = metrics.sums()
        #expect(newest === runs.last)
        #expect(sums.consumed["preview"] == 50 && sums.consumed["movie"] == 0 && sums.consumed["dump"] == 0)
        #expect(sums.consumerDrops["movie"]?[.storageBacklog] == 25 && sums.consumerDrops["dump"]?[.storageBacklog] == 25)
        #expect(sums.drops[.late] == 100)
        // A kept run still moving is counted as it is now.
        runs.last!.countCaptured(10)
        #expect(metrics.totals().captured == 1285)
    }

    /// Every run the session starts is added, however quickly the switches come (the counters
    /// once learnt of a run from the session's start event, which a second restart could
    /// overtake): the totals are the sums over the runs the session reported.
    @Test func everyRunOfQuickSwitchesIsCounted() async throws {
        let run = try RunningPreview(stages: "null")
        let seen = LockedBox<[EngineStatistics]>([])
        run.session.onRunStarted { s in seen.withLock { $0.append(s) } }
        try await run.start()
        _ = try await readPictures(run, count: 5)
        for enabled in [false, true, false] {
            let r = try await fetch(request(run.url("/api/stage"), method: .POST, json: #"{"name": "null", "enabled": \#(enabled)}"#))
            #expect(r.status == 200, "\(r.body)")
        }
        _ = try await readPictures(run, count: 3)
        await run.stop()
        let runs = seen.withLock { $0 }
        #expect(runs.count == 4, "\(runs.count) runs started")
        let totals = run.server.totals
        #expect(totals.captured == runs.reduce(0) { $0 + $1.captured })
        #expect(totals.delivered == runs.reduce(0) { $0 + $1.delivered })
        let text = String(decoding: run.server.metrics.scrape(server: run.server), as: UTF8.self)
        let line = text.split(separator: "\n").first { $0.hasPrefix("viewfinder_frames_captured_total ") }
        #expect(line.flatMap { Double($0.split(separator: " ").last ?? "") } == Double(totals.captured), "\(line ?? "no line")")
    }

    /// A viewer that never reads: its pictures are dropped (counted) while a movie recorded beside
    /// it loses nothing and another viewer keeps getting pictures.
    @Test func aStalledViewerDropsOnlyItsOwnPictures() async throws {
        let run = try RunningPreview(sim: "sim:width=640,height=480,fps=30")
        try await run.start()
        let moviePath = run.folder + "/beside.mov"
        try run.server.movie.startRecording(to: moviePath, delegate: nil)

        // The stalled viewer: a socket with a tiny receive buffer that sends the request and never reads.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(fd >= 0)
        var small: Int32 = 4096
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(run.port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        #expect(connected == 0)
        let req = Array("GET /stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8)
        #expect(send(fd, req, req.count, 0) == req.count)
        defer { close(fd) }

        let capturedBefore = run.session.statistics?.captured ?? 0
        // Meanwhile a live viewer reads for a few seconds.
        let live = try await readPictures(run, count: 60)
        #expect(live.pictures.count == 60)
        let deadline = monotonicNanoseconds() + 10_000_000_000
        while run.server.output.viewerLateDrops < 10 && monotonicNanoseconds() < deadline { try await Task.sleep(nanoseconds: 50_000_000) }
        run.server.movie.stopRecording()
        while run.server.movie.isRecording { try await Task.sleep(nanoseconds: 20_000_000) }

        let stats = try #require(run.session.statistics)
        #expect(stats.captured > capturedBefore + 60)
        #expect(run.server.output.viewerLateDrops >= 10, "the stalled viewer's pictures are dropped and counted")
        let movie = try #require(stats.consumers.first { $0.name == "recording" })
        #expect(movie.drops.total == 0, "the movie beside the stalled viewer drops nothing: \(movie.drops.byName)")
        #expect(movie.consumed > 60, "the movie took every frame delivered (\(movie.consumed) of \(stats.delivered))")
        await run.stop()
    }
}
