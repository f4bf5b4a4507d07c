import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import ServiceLifecycle
import Synchronization
import Viewfinder
import ViewfinderKit

/// How a ``PreviewServer`` listens and where it writes.
public struct PreviewConfiguration: Sendable {
    /// The address to listen on. Loopback by default; any other address requires a ``token``.
    public var host: String = "127.0.0.1"
    /// The TCP port (0: any free port, reported to `onListening`).
    public var port: Int = 8080
    /// The secret that every request except the page itself must carry, as
    /// `Authorization: Bearer TOKEN` or `?token=TOKEN`. Nil: no token (loopback only).
    public var token: String?
    /// The folder for stills and recordings started from the page; the server names the files.
    public var outputDirectory: String = "."
    /// The widest preview picture, pixels.
    public var previewWidth: Int = 640
    /// JPEG quality of the preview pictures, 1–100.
    public var previewQuality: Int = 75
    /// How often the statistics channel sends, seconds.
    public var statisticsInterval: Double = 0.25
    /// Seconds a connection may take to send a whole request (its headers, then its body), and
    /// may stay idle between requests; then it is closed. 0.5–600.
    public var requestTimeout: Double = 10

    public init() {}

    /// Whether `host` is a loopback address (`127.0.0.0/8`, `::1`, `localhost`). An IPv4
    /// address must be one whole (a name such as `127.evil.example` is not: it can point
    /// anywhere).
    public static func isLoopback(_ host: String) -> Bool {
        let h = host.lowercased()
        if h == "localhost" || h.hasSuffix(".localhost") || h == "::1" || h == "[::1]" { return true }
        var a = in_addr()
        guard inet_pton(AF_INET, h, &a) == 1 else { return false }
        return UInt32(bigEndian: a.s_addr) >> 24 == 127
    }

    /// A new random token: 128 bits as 32 hexadecimal digits.
    public static func generateToken() -> String {
        var g = SystemRandomNumberGenerator()
        return (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &g)) }.joined()
    }
}

/// Errors in setting up the preview server.
public enum PreviewError: Error, Equatable, CustomStringConvertible {
    /// A non-loopback address was given without a token.
    case tokenRequired(host: String)
    /// The token is empty or holds characters that do not survive a URL.
    case invalidToken
    /// The output folder does not exist or is not a folder.
    case outputDirectory(path: String)
    /// A preview setting is out of range.
    case invalidSetting(name: String, reason: String)

    public var description: String {
        switch self {
        case .tokenRequired(let h): return "listening on \(h) (not loopback) needs a token: give --token or let the server make one"
        case .invalidToken: return "the token must be 8 to 128 characters of A-Z, a-z, 0-9, '-', '_' or '.'"
        case .outputDirectory(let p): return "output folder '\(p)' does not exist or is not a folder"
        case .invalidSetting(let n, let r): return "preview setting \(n): \(r)"
        }
    }
}

/// The browser preview of a capture session: an HTTP server (Hummingbird) with the page (`/`),
/// the live picture as MJPEG (`/stream`), live statistics as server-sent events (`/events`),
/// Prometheus metrics (`/metrics`), and controls (`POST /api/...`: point of interest, still,
/// recording, stage switches).
///
/// ``init(session:device:configuration:logger:)`` adds three outputs to the session (the
/// preview, a photo output and a movie output for the page's buttons); call it before
/// `startRunning()`. ``run(onListening:)`` serves until its task is cancelled.
///
/// Security: with a token set, everything but the page needs it (`401` otherwise); controls are
/// POSTs with a JSON body (`415` for any other type, so a cross-site form cannot post), validated
/// (`400`: coordinates outside 0…1, unknown stage names); files go to the configured folder only,
/// with names the server makes.
public final class PreviewServer: Sendable {
    public let session: CaptureSession
    public let device: CaptureDevice
    public let configuration: PreviewConfiguration
    /// The preview output (pictures and per-frame values).
    public let output: PreviewOutput
    /// Takes the page's stills.
    public let photo: PhotoOutput
    /// Records the page's movies.
    public let movie: MovieFileOutput
    let logger: Logger
    let metrics: PreviewMetrics
    let hub = StatisticsHub()
    let previewLatency = LatencyHistogram()
    let controls: PreviewControls

    /// Adds the preview, photo and movie outputs to `session`.
    /// - Throws: ``PreviewError`` for a bad configuration, a session error if an output cannot be added.
    public init(session: CaptureSession, device: CaptureDevice, configuration: PreviewConfiguration, logger: Logger = Logger(label: "viewfinder.preview")) throws {
        if let t = configuration.token {
            let ok = (8...128).contains(t.count) && t.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" || $0 == ".") }
            guard ok else { throw PreviewError.invalidToken }
        } else if !PreviewConfiguration.isLoopback(configuration.host) {
            throw PreviewError.tokenRequired(host: configuration.host)
        }
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: configuration.outputDirectory, isDirectory: &isDir), isDir.boolValue else {
            throw PreviewError.outputDirectory(path: configuration.outputDirectory)
        }
        guard (0...65535).contains(configuration.port) else { throw PreviewError.invalidSetting(name: "port", reason: "\(configuration.port) is outside 0…65535") }
        guard configuration.statisticsInterval >= 0.02 && configuration.statisticsInterval <= 10 else {
            throw PreviewError.invalidSetting(name: "statistics interval", reason: "\(configuration.statisticsInterval) s is outside 0.02…10 s")
        }
        guard configuration.requestTimeout >= 0.5 && configuration.requestTimeout <= 600 else {
            throw PreviewError.invalidSetting(name: "request timeout", reason: "\(configuration.requestTimeout) s is outside 0.5…600 s")
        }
        self.session = session
        self.device = device
        self.configuration = configuration
        self.logger = logger
        output = PreviewOutput(maximumWidth: configuration.previewWidth, quality: configuration.previewQuality)
        photo = PhotoOutput(name: "still")
        movie = MovieFileOutput(name: "recording")
        let metrics = PreviewMetrics()
        self.metrics = metrics
        controls = PreviewControls(session: session, device: device, photo: photo, movie: movie, folder: configuration.outputDirectory, logger: logger)
        // Every restart of the session (a stage switch, a camera that came back) ends a run: the
        // counters go on across it whether or not /metrics was read between.
        session.onRunStarted { metrics.runStarted($0) }
        // A session already running when the preview was made: its run counts from here too.
        if session.isRunning, let s = session.statistics { metrics.runStarted(s) }
        session.beginConfiguration()
        try session.addOutput(output)
        try session.addOutput(photo)
        try session.addOutput(movie)
        try session.commitConfiguration()
    }

    /// Frames captured, delivered and dropped over the whole preview: every run of the session
    /// (a stage switch restarts it), not only the last.
    package var totals: (captured: UInt64, delivered: UInt64, dropped: UInt64) { metrics.totals() }

    /// Serves until the calling task is cancelled (or the server fails to start). Cancellation
    /// shuts the server down gracefully: the open streams end, then the listener closes; a
    /// connection still open 2 s later (a viewer that stopped reading) is closed.
    /// - Parameter onListening: called once with the port the server listens on.
    public func run(onListening: @escaping @Sendable (Int) -> Void = { _ in }) async throws {
        let app = Application(
            router: makeRouter(),
            // A connection that has sent no complete request for 10 s is closed (a client that
            // opens connections and never finishes their headers could hold every descriptor);
            // a stream being answered is never idle.
            server: HTTPServerBuilder { [timeout = configuration.requestTimeout] responder in
                PreviewHTTP1Channel(responder: responder, idleTimeout: .milliseconds(Int64(timeout * 1000)))
            },
            configuration: .init(address: .hostname(configuration.host, port: configuration.port), serverName: "viewfinder"),
            onServerRunning: { channel in onListening(channel.localAddress?.port ?? 0) },
            logger: logger
        )
        let group = ServiceGroup(services: [app], logger: logger)
        // Not a child task: the caller's cancellation becomes a graceful shutdown, not a cancellation
        // of the server's connections mid-write.
        let serving = Task { try await group.run() }
        let ticker = Task { await self.tickStatistics() }
        let output = self.output, hub = self.hub
        defer { ticker.cancel() }
        try await withTaskCancellationHandler {
            try await serving.value
        } onCancel: {
            output.broadcaster.finishAll()
            hub.finishAll()
            Task { await group.triggerGracefulShutdown() }
            // A viewer that stopped reading holds its response in a write that never completes:
            // after a grace period the server's tasks are cancelled, connections and all.
            Task {
                try? await Task.sleep(nanoseconds: 2_000_000_000)
                serving.cancel()
            }
        }
        output.broadcaster.finishAll()
        hub.finishAll()
    }

    /// Makes the statistics message every interval while the server runs.
    func tickStatistics() async {
        let builder = StatisticsBuilder()
        let ns = UInt64(configuration.statisticsInterval * 1e9)
        while !Task.isCancelled {
            let message = builder.message(server: self)
            hub.publish(message)
            try? await Task.sleep(nanoseconds: ns)
        }
    }

    func makeRouter() -> Router<BasicRequestContext> {
        let router = Router(context: BasicRequestContext.self)
        router.add(middleware: TokenMiddleware(token: configuration.token, openPaths: ["/", "/favicon.ico"]))
        if configuration.token == nil { router.add(middleware: LoopbackOriginMiddleware(boundHost: configuration.host)) }
        router.get("/") { _, _ in Self.page() }
        router.get("/favicon.ico") { _, _ in Response(status: .noContent) }
        // A known path asked with another method: 405 with the method it takes (not 404, which
        // says the path does not exist), as JSON like every other error of the API; HEAD of a
        // page or the metrics is answered as GET's head.
        let methods: [(String, HTTPRequest.Method)] = [("/", .get), ("/stream", .get), ("/events", .get), ("/metrics", .get), ("/api/state", .get),
                                                       ("/api/point", .post), ("/api/still", .post), ("/api/record", .post), ("/api/stage", .post)]
        for (path, allowed) in methods {
            for other: HTTPRequest.Method in [.get, .post, .put, .delete, .patch] where other != allowed {
                router.on(RouterPath(path), method: other) { _, _ -> Response in
                    throw HTTPError(.methodNotAllowed, headers: [.allow: allowed.rawValue], message: "\(path) takes \(allowed.rawValue), not \(other.rawValue)")
                }
            }
        }
        // HEAD of every GET path: GET's status and headers (its Content-Length, or for a stream
        // none), no body (the encoder sends none for a HEAD); a stream's viewer is not subscribed.
        router.head("/") { _, _ in Self.headOf(Self.page()) }
        router.head("/metrics") { _, _ in Self.headOf(self.metricsResponse()) }
        router.head("/api/state") { _, _ in Self.headOf(self.stateResponse()) }
        router.head("/stream") { _, _ in Self.headOf(status: .ok, headers: Self.streamHeaders) }
        router.head("/events") { _, _ in Self.headOf(status: .ok, headers: Self.eventsHeaders) }
        router.get("/stream") { _, _ in self.streamResponse() }
        router.get("/events") { _, _ in self.eventsResponse() }
        router.get("/metrics") { _, _ in self.metricsResponse() }
        router.get("/api/state") { _, _ in self.stateResponse() }
        router.post("/api/point") { request, context in
            let body: PointRequest = try await Self.decode(request, context: context, timeout: self.configuration.requestTimeout)
            let applied = try self.controls.setPoint(body)
            return Self.json(applied)
        }
        router.post("/api/still") { request, context in
            let _: EmptyRequest = try await Self.decode(request, context: context, timeout: self.configuration.requestTimeout)
            return Self.json(try await self.controls.takeStill())
        }
        router.post("/api/record") { request, context in
            let body: RecordRequest = try await Self.decode(request, context: context, timeout: self.configuration.requestTimeout)
            return Self.json(try await self.controls.record(body))
        }
        router.post("/api/stage") { request, context in
            let body: StageRequest = try await Self.decode(request, context: context, timeout: self.configuration.requestTimeout)
            return Self.json(try self.controls.setStage(body))
        }
        return router
    }

    static let boundary = "vfpreviewframe"

    /// The MJPEG stream: one part per picture, from this viewer's one-picture mailbox.
    static func page() -> Response {
        Response(status: .ok, headers: [.contentType: "text/html; charset=utf-8", .cacheControl: "no-store"],
                 body: .init(byteBuffer: ByteBuffer(string: PreviewPage.html)))
    }

    func metricsResponse() -> Response {
        Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                 body: .init(byteBuffer: ByteBuffer(bytes: metrics.scrape(server: self))))
    }

    func stateResponse() -> Response {
        Self.json(hub.latest ?? StatisticsBuilder().message(server: self))
    }

    /// The answer to a HEAD: `response`'s status and headers (with the Content-Length its body
    /// has, or none for a stream), without the body.
    static func headOf(_ response: Response) -> Response {
        var headers = response.headers
        if let n = response.body.contentLength { headers[.contentLength] = String(n) } else { headers[.contentLength] = nil }
        return headOf(status: response.status, headers: headers)
    }

    /// A HEAD's answer with these headers as they are (a stream's: no Content-Length).
    static func headOf(status: HTTPResponse.Status, headers: HTTPFields) -> Response {
        Response(status: status, headers: headers, body: ResponseBody(contentLength: nil) { writer in try await writer.finish(nil) })
    }

    static let streamHeaders: HTTPFields = [.contentType: "multipart/x-mixed-replace; boundary=\(PreviewServer.boundary)", .cacheControl: "no-store"]
    static let eventsHeaders: HTTPFields = [.contentType: "text/event-stream", .cacheControl: "no-store"]

    func streamResponse() -> Response {
        let (pictures, cancel) = output.broadcaster.subscribe()
        let counters = output.counters
        let latency = previewLatency
        let metrics = self.metrics
        let body = ResponseBody { writer in
            defer { cancel() }
            for await p in pictures {
                if Task.isCancelled { break }
                var part = ByteBuffer(string: "--\(Self.boundary)\r\nContent-Type: image/jpeg\r\nContent-Length: \(p.jpeg.readableBytes)\r\nX-Frame-Sequence: \(p.sequence)\r\n\r\n")
                var jpeg = p.jpeg
                part.writeBuffer(&jpeg)
                part.writeString("\r\n")
                try await writer.write(part)
                let age = monotonicNanoseconds() &- p.captureNanoseconds
                latency.record(nanoseconds: age)
                metrics.recordPreviewLatency(nanoseconds: age)
                counters.sent.add(1, ordering: .relaxed)
            }
            try await writer.finish(nil)
        }
        return Response(status: .ok, headers: Self.streamHeaders, body: body)
    }

    /// Server-sent events: the statistics message every interval.
    func eventsResponse() -> Response {
        let (messages, cancel) = hub.subscribe()
        let body = ResponseBody { writer in
            defer { cancel() }
            try await writer.write(ByteBuffer(string: "retry: 1000\n\n"))
            for await m in messages {
                if Task.isCancelled { break }
                try await writer.write(ByteBuffer(string: "event: stats\ndata: \(m)\n\n"))
            }
            try await writer.finish(nil)
        }
        return Response(status: .ok, headers: Self.eventsHeaders, body: body)
    }

    static func json(_ text: String) -> Response {
        Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    static func json<T: Encodable>(_ value: T) -> Response {
        let data = (try? JSONEncoder().encode(value)) ?? Data("{}".utf8)
        return Response(status: .ok, headers: [.contentType: "application/json"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// A control request's JSON body (at most 4 KiB, `Content-Type: application/json`, whole
    /// within `timeout` seconds).
    static func decode<T: Decodable>(_ request: Request, context: BasicRequestContext, timeout: Double) async throws -> T {
        guard let type = request.headers[.contentType], type.lowercased().hasPrefix("application/json") else {
            throw HTTPError(.unsupportedMediaType, message: "controls take a JSON body (Content-Type: application/json)")
        }
        // A body announced larger than the limit is refused before any of it is read.
        if let announced = request.headers[.contentLength], let n = UInt64(announced.trimmingCharacters(in: .whitespaces)), n > 4096 {
            throw HTTPError(.contentTooLarge, message: "the body is larger than 4 KiB")
        }
        let buffer: ByteBuffer
        // The whole body within 10 s, as the headers (the idle timeout only sees a connection
        // that sends nothing; one trickling a byte every few seconds would hold it for ever).
        let collected: ByteBuffer?
        do {
            collected = try await withThrowingTaskGroup(of: ByteBuffer?.self) { group in
                group.addTask { var r = request; return try await r.collectBody(upTo: 4096) }
                group.addTask { try await Task.sleep(nanoseconds: UInt64(timeout * 1e9)); return nil }
                defer { group.cancelAll() }
                return try await group.next() ?? nil
            }
        } catch is CancellationError {
            throw HTTPError(.requestTimeout, headers: [.connection: "close"], message: "the request's body did not arrive within \(timeout) s")
        } catch {
            throw HTTPError(.contentTooLarge, message: "the body is larger than 4 KiB")
        }
        guard let got = collected else {
            throw HTTPError(.requestTimeout, headers: [.connection: "close"], message: "the request's body did not arrive within \(timeout) s")
        }
        buffer = got
        let data = Data(buffer.readableBytesView)
        if let problem = jsonProblem(in: data) { throw HTTPError(.badRequest, message: "bad JSON body: \(problem)") }
        do { return try JSONDecoder().decode(T.self, from: data.isEmpty ? Data("{}".utf8) : data) } catch {
            throw HTTPError(.badRequest, message: "bad JSON body: \(jsonDecodingFailure(error))")
        }
    }
}

/// Without a token (a loopback server), answers 403 to requests whose `Host` or `Origin` is not
/// this machine's loopback: a page elsewhere that points a name of its own at 127.0.0.1 (DNS
/// rebinding) cannot read the statistics or press the buttons.
struct LoopbackOriginMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext
    let boundHost: String

    /// The host name of an authority (`host:port`, `[v6]:port`) or an origin (`scheme://host:port`).
    static func hostName(_ s: Substring) -> Substring {
        var rest = s
        if let r = rest.range(of: "://") { rest = rest[r.upperBound...] }
        if rest.hasPrefix("[") { return rest.dropFirst().prefix { $0 != "]" } }
        return rest.prefix { $0 != ":" && $0 != "/" }
    }

    func isLoopback(_ name: Substring) -> Bool {
        PreviewConfiguration.isLoopback(String(name)) || name.lowercased() == boundHost.lowercased()
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if let authority = request.head.authority, !isLoopback(Self.hostName(Substring(authority))) {
            return Self.forbidden("Host '\(authority)' is not this machine's loopback address (use http://127.0.0.1:PORT/, or --token)")
        }
        if let origin = request.headers[.origin], origin != "null", !isLoopback(Self.hostName(Substring(origin))) {
            return Self.forbidden("a request from the page of '\(origin)' is refused")
        }
        return try await next(request, context)
    }

    static func forbidden(_ why: String) -> Response {
        Response(status: .forbidden, headers: [.contentType: "text/plain"], body: .init(byteBuffer: ByteBuffer(string: "403: \(why)\n")))
    }
}

/// Answers 401 to requests without the token, except for the page's own paths.
struct TokenMiddleware: RouterMiddleware {
    typealias Context = BasicRequestContext
    let token: [UInt8]?
    let openPaths: Set<String>

    init(token: String?, openPaths: Set<String>) {
        self.token = token.map { Array($0.utf8) }
        self.openPaths = openPaths
    }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let token, !openPaths.contains(request.uri.path) else { return try await next(request, context) }
        var given: Substring?
        // The scheme's name is case-insensitive (RFC 9110 §11.1): "bearer" as well as "Bearer".
        if let auth = request.headers[.authorization], auth.count > 7, auth.prefix(7).lowercased() == "bearer " {
            given = auth.dropFirst(7).drop(while: { $0 == " " })
        }
        if given == nil, let q = request.uri.queryParameters.get("token") { given = Substring(q) }
        guard let given, Self.constantTimeEqual(Array(given.utf8), token) else {
            return Response(status: .unauthorized, headers: [.wwwAuthenticate: "Bearer realm=\"viewfinder\"", .contentType: "text/plain"],
                            body: .init(byteBuffer: ByteBuffer(string: "401: this preview needs its token (Authorization: Bearer TOKEN, or ?token=TOKEN)\n")))
        }
        return try await next(request, context)
    }

    /// Compares without an early exit, so the time taken does not tell how much of a guess matched.
    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        var diff = UInt8(a.count == b.count ? 0 : 1)
        for i in 0..<b.count { diff |= (i < a.count ? a[i] : 0) ^ b[i] }
        return diff == 0
    }
}

/// The latest statistics message, offered to every `/events` subscriber (newest kept).
final class StatisticsHub: Sendable {
    private let state = LockedBox<(latest: String?, next: Int, subscribers: [Int: AsyncStream<String>.Continuation], closed: Bool)>((nil, 0, [:], false))

    var latest: String? { state.withLock { $0.latest } }

    func subscribe() -> (AsyncStream<String>, @Sendable () -> Void) {
        let (stream, continuation) = AsyncStream.makeStream(of: String.self, bufferingPolicy: .bufferingNewest(2))
        let id = state.withLock { s -> Int in
            if s.closed { continuation.finish(); return 0 }
            s.next += 1
            s.subscribers[s.next] = continuation
            if let l = s.latest { continuation.yield(l) }
            return s.next
        }
        let state = self.state
        let cancel: @Sendable () -> Void = { state.withLock { $0.subscribers.removeValue(forKey: id) }?.finish() }
        continuation.onTermination = { _ in cancel() }
        return (stream, cancel)
    }

    func publish(_ message: String) {
        let all = state.withLock { s -> [AsyncStream<String>.Continuation] in s.latest = message; return Array(s.subscribers.values) }
        for c in all { c.yield(message) }
    }

    var subscriberCount: Int { state.withLock { $0.subscribers.count } }

    func finishAll() {
        let all = state.withLock { s -> [AsyncStream<String>.Continuation] in
            s.closed = true
            defer { s.subscribers.removeAll() }
            return Array(s.subscribers.values)
        }
        for c in all { c.finish() }
    }
}
