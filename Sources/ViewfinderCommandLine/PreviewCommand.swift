import ArgumentParser
import Dispatch
import Foundation
import ViewfinderKit
import ViewfinderPreview

struct PreviewCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "preview",
        abstract: "Serve a live preview in the browser: picture, tap-to-focus/expose, stills, recording, stage switches, charts, Prometheus /metrics.",
        discussion: """
        Opens http://HOST:PORT/ (the page), /stream (MJPEG), /events (statistics, server-sent \
        events), /metrics (Prometheus). Listens on loopback unless --bind says otherwise; any other \
        address needs a token (--token, or one is made and printed). With a token every path but \
        the page needs it: Authorization: Bearer TOKEN, or ?token=TOKEN. Stills and recordings from \
        the page go to --output with names the server makes. Ctrl-C stops.
        """)

    @OptionGroup var deviceOptions: DeviceOptions
    @Option(help: "Stages, e.g. stabilise,deadline:max_age_ms=50 (the page can switch each on and off).") var stages: String?
    @Option(parsing: .unconditional, help: "TCP port (0: any free port).") var port: Int = 8080
    @Option(help: "Address to listen on. Loopback by default; another address needs a token.") var bind: String = "127.0.0.1"
    @Option(help: "The access token (8–128 of A-Z a-z 0-9 - _ .). Default: none on loopback, a new random one elsewhere.") var token: String?
    @Option(help: "Folder for stills and recordings started from the page.") var output: String = "."
    @Option(parsing: .unconditional, help: "Widest preview picture, pixels (larger frames are scaled down by an integer factor).") var previewWidth: Int = 640
    @Option(parsing: .unconditional, help: "JPEG quality of the preview pictures, 1–100.") var previewQuality: Int = 75
    @Option(parsing: .unconditional, help: "Clockwise rotation of the picture as shown: 0, 90, 180 or 270 degrees.") var rotation: Int = 0
    @Flag(help: "Mirror the picture left-right (after rotation), as a front camera.") var mirror = false
    @Option(parsing: .unconditional, help: "Stop after this many seconds (default: until Ctrl-C).") var duration: Double?

    func validate() throws {
        if !(0...65535).contains(port) { throw ValidationError("--port must be in 0…65535") }
        if !(64...7680).contains(previewWidth) { throw ValidationError("--preview-width must be in 64…7680") }
        if !(1...100).contains(previewQuality) { throw ValidationError("--preview-quality must be in 1…100") }
        if ![0, 90, 180, 270].contains(rotation) { throw ValidationError("--rotation must be 0, 90, 180 or 270") }
        // An address written as four numbers must be an IPv4 address (999.1.1.1 is a typo, not a
        // host name to look up).
        let parts = bind.split(separator: ".", omittingEmptySubsequences: false)
        if parts.count == 4, parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isNumber) }), !parts.allSatisfy({ (Int($0) ?? 256) <= 255 }) {
            throw ValidationError("--bind '\(bind)' is not an IPv4 address (each number 0…255)")
        }
        try checkDuration(duration)
        // A folder named for stills and recordings that cannot take them is found now, not at the
        // page's first Still or Record. (The default, the working folder, is not checked: a
        // preview that never saves needs no writable folder.)
        if output != ".", FileManager.default.fileExists(atPath: output), faccessat(AT_FDCWD, output, W_OK | X_OK, AT_EACCESS) != 0 {
            throw ValidationError("--output '\(output)' cannot take new files (\(String(cString: strerror(errno))))")
        }
    }

    func run() throws {
        let specs = try stages.map { try StageSpec.parseList($0) } ?? []
        let (session, dev) = try deviceOptions.makeSession(defaultDevice: nil, registry: ViewfinderCommandLine.stages)
        // The page's taps drive the exposure and focus loops: run them where the device has them
        // — unless the pipeline runs its own exposure or focus stage, which then stays the only
        // loop of its kind (two would fight over the same controls).
        let owned = Set(specs.filter(\.enabled).map(\.name))
        try dev.configure { s in
            if !owned.contains("exposure"), dev.isExposureModeSupported(.continuous) { s.exposureMode = .continuous }
            if !owned.contains("focus"), dev.isFocusModeSupported(.continuous) { s.focusMode = .continuous }
        }
        session.beginConfiguration()
        try session.setStages(specs)
        // --duration is the preview's, timed below from the start: the engine's own would start
        // again with every run of the session (a stage switch restarts it).
        var options = EngineOptions()
        if !dev.source.isLive { options.stallTimeoutSeconds = 30 }
        try session.setEngineOptions(options)
        try session.commitConfiguration()

        var cfg = PreviewConfiguration()
        cfg.host = bind
        cfg.port = port
        cfg.outputDirectory = output
        cfg.previewWidth = previewWidth
        cfg.previewQuality = previewQuality
        var generated = false
        if let token { cfg.token = token } else if !PreviewConfiguration.isLoopback(bind) {
            cfg.token = PreviewConfiguration.generateToken()
            generated = true
        }
        let server: PreviewServer
        do { server = try PreviewServer(session: session, device: dev, configuration: cfg) } catch let e as PreviewError {
            throw ValidationError(e.description)
        }
        for c in session.connections where c.mediaType == .video {
            try c.setVideoRotationAngle(rotation)
            c.isVideoMirrored = mirror
        }

        try session.startRunning()
        let done = DispatchSemaphore(value: 0)
        let failure = LockedBox<(any Error)?>(nil)
        let (bindHost, shownToken, madeToken) = (bind, cfg.token, generated)
        let task = Task {
            do {
                try await server.run { port in
                    // A wildcard address is no place to browse to: show this machine's name.
                    let wildcard = bindHost == "0.0.0.0" || bindHost == "::" || bindHost == "[::]"
                    let shown = wildcard ? Self.hostName() : bindHost
                    var line = "viewfinder preview: http://\(Self.address(shown, port))/"
                    if let t = shownToken { line += "?token=\(t)" }
                    if madeToken { line += "  (token made for this run)" }
                    StandardStreams.output(line + "\n")
                }
            } catch is CancellationError {
            } catch {
                failure.withLock { $0 = error }
            }
            done.signal()
        }
        // Ctrl-C, SIGTERM (or the duration's end) stops the server, then the session. A recording
        // ends at the request, not after the server has waited for a stalled viewer (that added
        // up to 2 s to the movie).
        let movie = server.movie
        let stopped = LockedBox(false)
        let stop: @Sendable () -> Void = {
            // Once: a second stop request would move the recording's end to its own time.
            guard !stopped.withLock({ s in defer { s = true }; return s }) else { return }
            if movie.isRecording { movie.stopRecording() }
            task.cancel()
        }
        let interrupt = onInterrupt(stop)
        defer { interrupt.cancel() }
        DispatchQueue.global().async {
            session.waitUntilFinished()
            stop()
        }
        if let duration { DispatchQueue.global().asyncAfter(deadline: .now() + duration) { stop() } }
        done.wait()
        // A server that ended by itself (it failed) was not stopped: its recording ends here.
        if !stopped.withLock({ $0 }), server.movie.isRecording { server.movie.stopRecording() }
        session.stopRunning()
        if let e = failure.withLock({ $0 }) { throw RuntimeFailure(message: Self.serverFailure(e, host: bind, port: port)) }
        if session.statistics != nil {
            // Over every run of the session (a stage switch restarts it), not the last one's.
            let t = server.totals
            var stderr = StandardError()
            print("captured \(t.captured), delivered \(t.delivered), dropped \(t.dropped); preview pictures \(server.output.pictureCount)", to: &stderr)
        }
    }
}

extension PreviewCommand {
    /// `host:port`, an IPv6 address in brackets.
    static func address(_ host: String, _ port: Int) -> String {
        host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// This machine's host name (for the URL printed when listening on every address).
    static func hostName() -> String {
        var buf = [CChar](repeating: 0, count: 256)
        guard gethostname(&buf, buf.count - 1) == 0 else { return "localhost" }
        let name = String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "localhost" : name
    }

    /// The server's failure in words: a socket call that failed (the port taken, an address not
    /// on this machine) as "cannot listen on HOST:PORT: reason", anything else as it describes
    /// itself. (SwiftNIO describes a failed call as `bind(descriptor:ptr:bytes:): reason (errno: N)`.)
    static func serverFailure(_ error: any Error, host: String, port: Int) -> String {
        let text = "\(error)"
        for call in ["bind(", "listen(", "socket("] where text.hasPrefix(call) {
            if let r = text.range(of: "(errno: ", options: .backwards),
               let n = Int32(text[r.upperBound...].prefix { $0.isNumber }) {
                return "preview server: cannot listen on \(address(host, port)): \(String(cString: strerror(n))) (errno \(n))"
            }
        }
        return "preview server: \(text)"
    }
}
