import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// A small HTTP/1.1 client for talking to the preview server in the tests: one connection per
/// request (`Connection: close`) to a numeric IPv4 host, the response's head parsed, and the body
/// — by `Content-Length`, chunked, or up to the end of the connection — handed over piece by piece
/// as it arrives, so the MJPEG and event streams can be read part by part while they are sent.
///
/// It replaces AsyncHTTPClient, whose TLS stack (BoringSSL, ~400 C files), HTTP/2 and SOCKS
/// modules were built three times in every CI run (debug, TSan, ASan) for these tests alone.
enum LoopbackHTTP {
    struct Request: Sendable {
        var url: String
        var method: String = "GET"
        var headers: [(name: String, value: String)] = []
        var body: [UInt8]? = nil
        /// The request line's version (`1.0` for an HTTP/1.0 client).
        var version = "1.1"
        /// A `Content-Length` to announce instead of the body's own (a client lying about its body).
        var announcedLength: Int? = nil
    }

    struct Response: Sendable {
        let status: UInt
        /// The header lines in the order received; names as sent.
        let headers: [(name: String, value: String)]
        /// The body's bytes as they arrive; ends with the body (or throws on a broken or timed-out
        /// connection). Stopping early (break, cancellation) closes the connection.
        let body: AsyncThrowingStream<[UInt8], any Error>

        /// The first header of that name (case-insensitive).
        func header(_ name: String) -> String? {
            headers.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
        }

        /// The whole body (at most `limit` bytes).
        func collect(upTo limit: Int) async throws -> [UInt8] {
            var all: [UInt8] = []
            for try await piece in body {
                all += piece
                if all.count > limit { throw ClientError("body longer than \(limit) bytes") }
            }
            return all
        }
    }

    struct ClientError: Error, CustomStringConvertible {
        let description: String
        init(_ d: String) { description = d }
    }

    /// Sends `request` and returns when the response's head has arrived; `timeout` bounds each
    /// wait on the socket (connect, send, every read).
    static func execute(_ request: Request, timeout: Double = 10) async throws -> Response {
        guard let url = URLComponents(string: request.url), url.scheme == "http", let host = url.host, let port = url.port else {
            throw ClientError("not an http://host:port URL: \(request.url)")
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        guard inet_pton(AF_INET, host == "localhost" ? "127.0.0.1" : host, &address.sin_addr) == 1 else {
            throw ClientError("not a numeric IPv4 host: \(host)")
        }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ClientError("socket: \(String(cString: strerror(errno)))") }
        var tv = timeval(tv_sec: Int(timeout), tv_usec: Int((timeout - timeout.rounded(.down)) * 1e6))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let e = String(cString: strerror(errno)); close(fd)
            throw ClientError("connect to \(host):\(port): \(e)")
        }

        var target = url.percentEncodedPath.isEmpty ? "/" : url.percentEncodedPath
        if let q = url.percentEncodedQuery { target += "?" + q }
        var head = "\(request.method) \(target) HTTP/\(request.version)\r\n"
        // A request's own Host (a test of what the server accepts) replaces the address's.
        if !request.headers.contains(where: { $0.name.lowercased() == "host" }) { head += "Host: \(host):\(port)\r\n" }
        head += "Connection: close\r\n"
        for h in request.headers { head += "\(h.name): \(h.value)\r\n" }
        if let body = request.body { head += "Content-Length: \(request.announcedLength ?? body.count)\r\n" }
        head += "\r\n"
        do {
            try sendAll(fd, Array(head.utf8) + (request.body ?? []))
        } catch {
            close(fd)
            throw error
        }

        let (stream, bodyOut) = AsyncThrowingStream.makeStream(of: [UInt8].self, throwing: (any Error).self)
        // Stopping the body early (break or cancellation) shuts the socket down, which wakes the
        // reading thread; only that thread closes the descriptor.
        bodyOut.onTermination = { _ in _ = shutdown(fd, Int32(SHUT_RDWR)) }
        return try await withCheckedThrowingContinuation { (headOut: CheckedContinuation<Response, any Error>) in
            let reader = Thread {
                defer { close(fd) }
                var connection = Connection(fd: fd)
                let status: UInt, headers: [(name: String, value: String)]
                do {
                    (status, headers) = try connection.readHead()
                } catch {
                    headOut.resume(throwing: error)
                    bodyOut.finish(throwing: error)
                    return
                }
                let response = Response(status: status, headers: headers, body: stream)
                headOut.resume(returning: response)
                do {
                    if request.method == "HEAD" || status == 204 || status == 304 {
                        // no body
                    } else if response.header("Transfer-Encoding")?.lowercased().contains("chunked") == true {
                        try connection.readChunked { bodyOut.yield($0) }
                    } else if let length = response.header("Content-Length").flatMap(Int.init) {
                        try connection.read(exactly: length) { bodyOut.yield($0) }
                    } else {
                        try connection.readToEnd { bodyOut.yield($0) }
                    }
                    bodyOut.finish()
                } catch {
                    bodyOut.finish(throwing: error)
                }
            }
            reader.start()
        }
    }

    private static func sendAll(_ fd: Int32, _ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw ClientError("send: \(String(cString: strerror(errno)))")
            }
            sent += n
        }
    }

    /// The reading side of one connection: a buffer of received bytes not yet consumed.
    private struct Connection {
        let fd: Int32
        var pending: [UInt8] = []
        var ended = false

        init(fd: Int32) { self.fd = fd }

        /// Receives more bytes into `pending`; false at the end of the connection.
        mutating func fill() throws -> Bool {
            if ended { return false }
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            while true {
                let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress!, $0.count, 0) }
                if n > 0 { pending += chunk[0..<n]; return true }
                if n == 0 { ended = true; return false }
                switch errno {
                case EINTR: continue
                case EAGAIN, EWOULDBLOCK: throw ClientError("timed out waiting for the server")
                // A server that answers before reading all of a request's body (e.g. 413) and
                // closes resets the connection; what it sent before is already here.
                case ECONNRESET: ended = true; return false
                default: throw ClientError("recv: \(String(cString: strerror(errno)))")
                }
            }
        }

        mutating func line() throws -> String {
            while true {
                if let i = find([13, 10], in: pending) {
                    let s = String(decoding: pending[0..<i], as: UTF8.self)
                    pending.removeSubrange(0..<(i + 2))
                    return s
                }
                guard try fill() else { throw ClientError("connection ended inside a line") }
            }
        }

        mutating func readHead() throws -> (UInt, [(name: String, value: String)]) {
            var statusLine = try line()
            // 1xx interim responses come before the real one.
            while true {
                let parts = statusLine.split(separator: " ", maxSplits: 2)
                guard parts.count >= 2, parts[0].hasPrefix("HTTP/1."), let code = UInt(parts[1]) else {
                    throw ClientError("not an HTTP/1.x status line: \(statusLine.prefix(80))")
                }
                var headers: [(name: String, value: String)] = []
                while true {
                    let l = try line()
                    if l.isEmpty { break }
                    guard let colon = l.firstIndex(of: ":") else { throw ClientError("bad header line: \(l.prefix(80))") }
                    headers.append((String(l[..<colon]), l[l.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
                }
                if code >= 200 || code < 100 { return (code, headers) }
                statusLine = try line()
            }
        }

        mutating func read(exactly count: Int, _ deliver: ([UInt8]) -> Void) throws {
            var left = count
            while left > 0 {
                if pending.isEmpty, try !fill() { throw ClientError("connection ended \(left) bytes before the body's end") }
                let n = min(left, pending.count)
                deliver(Array(pending[0..<n]))
                pending.removeSubrange(0..<n)
                left -= n
            }
        }

        mutating func readChunked(_ deliver: ([UInt8]) -> Void) throws {
            while true {
                let sizeLine = try line()
                guard let size = Int(sizeLine.split(separator: ";")[0].trimmingCharacters(in: .whitespaces), radix: 16) else {
                    throw ClientError("bad chunk size line: \(sizeLine.prefix(40))")
                }
                if size == 0 {
                    while try !line().isEmpty {}  // trailers
                    return
                }
                try read(exactly: size, deliver)
                guard try line().isEmpty else { throw ClientError("chunk not followed by CRLF") }
            }
        }

        mutating func readToEnd(_ deliver: ([UInt8]) -> Void) throws {
            while true {
                if !pending.isEmpty { deliver(pending); pending.removeAll(keepingCapacity: true) }
                guard try fill() else { return }
            }
        }
    }
}
