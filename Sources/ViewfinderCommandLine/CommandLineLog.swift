import Foundation
import Logging
import ViewfinderKit

/// The command line's log lines on standard error (`viewfinder` sets it up in `main`).
///
/// A failing command prints its error once, as `viewfinder: error: …`. The libraries also log what
/// fails where it fails (an output that cannot write, the session's runtime error), which before
/// printed the same error two or three times above that line. So a line at `error` (not
/// `critical`) is held for a second: a command that ends with an error in that time drops the held lines that
/// say the same (their message contains the command's error) and prints the others above its own
/// line; a line still held after the second is printed then, so an error in a long capture that
/// goes on is seen when it happens.
struct CommandLineLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        var text = "\(Self.timestamp()) \(event.level) \(label):"
        if !all.isEmpty { text += " " + all.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: " ") }
        text += " [\(event.source)] \(event.message)\n"
        if event.level == .error {
            HeldErrorLines.shared.hold(message: event.message.description, line: text)
        } else {
            StandardStreams.error(text)
        }
    }

    private static func timestamp() -> String {
        var now = time(nil)
        var parts = tm()
        localtime_r(&now, &parts)
        var buffer = [Int8](repeating: 0, count: 64)
        let n = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S%z", &parts)
        return String(decoding: buffer[..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Error log lines held for a second (``CommandLineLogHandler``).
final class HeldErrorLines: @unchecked Sendable {
    // @unchecked Sendable: `held` and `next` are touched only under `lock`.
    static let shared = HeldErrorLines()
    static let holdSeconds = 1.0

    private let lock = NSLock()
    private var held: [(id: Int, message: String, line: String)] = []
    private var next = 0

    func hold(message: String, line: String) {
        let id = lock.withLock { () -> Int in
            next += 1
            held.append((next, message, line))
            return next
        }
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.holdSeconds) { [self] in
            if let line = take(id) { StandardStreams.error(line) }
        }
    }

    private func take(_ id: Int) -> String? {
        lock.withLock {
            guard let i = held.firstIndex(where: { $0.id == id }) else { return nil }
            return held.remove(at: i).line
        }
    }

    /// At a command's end: prints the lines still held, except those that say `error` (the
    /// command's own one-line error, printed next) again.
    func release(before error: String?, write: (String) -> Void = StandardStreams.error) {
        let lines = lock.withLock { () -> [(id: Int, message: String, line: String)] in
            defer { held.removeAll() }
            return held
        }
        for l in lines {
            if let error, !error.isEmpty, l.message.contains(error) { continue }
            write(l.line)
        }
    }
}
