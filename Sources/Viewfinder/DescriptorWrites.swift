#if canImport(Glibc)
import Glibc
#endif

/// The package's `write(2)` loop and its cut back to whole records, in one place: the y4m writer,
/// the frame output, the metadata files, the standard streams, and the movie and dump files
/// write through these.
package enum DescriptorWrite {
    /// Writes `count` bytes from `bytes` to `fd`: a short write goes on, `EINTR` is retried, and
    /// `EAGAIN` (a non-blocking pipe that is full) calls `whenBlocked` with the bytes written so
    /// far — it waits for room and returns, or throws to give up; without it `EAGAIN` is an error.
    /// Returns nil when every byte went out, else the error (`ENOSPC` for a write that wrote
    /// nothing); `written` counts the bytes that went out either way. With `position` the bytes
    /// go there (`pwrite(2)`: a header patched in place) and the file offset stays where it is.
    package static func all(_ fd: Int32, _ bytes: UnsafeRawPointer, _ count: Int, at position: UInt64? = nil, written: inout Int,
                            whenBlocked: ((_ written: Int) throws -> Void)? = nil) rethrows -> Int32? {
        written = 0
        while written < count {
            let n = position.map { Glibc.pwrite(fd, bytes + written, count - written, off_t($0) + off_t(written)) }
                ?? Glibc.write(fd, bytes + written, count - written)
            if n > 0 { written += n; continue }
            if n == 0 { return ENOSPC }
            let e = errno
            if e == EINTR { continue }
            if e == EAGAIN || e == EWOULDBLOCK, whenBlocked != nil { try whenBlocked?(written); continue }
            return e
        }
        return nil
    }

    /// After a failed write: cuts `fd` back to `length` bytes and moves its offset there — only a
    /// regular file (a pipe, a terminal or a device keeps what it took). Whether it was cut.
    @discardableResult
    package static func cutRegularFile(_ fd: Int32, to length: Int) -> Bool {
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, ftruncate(fd, off_t(length)) == 0 else { return false }
        _ = lseek(fd, off_t(length), SEEK_SET)
        return true
    }
}

/// A file of lines that holds whole lines only: what a failed write (a full disk) tore is cut
/// off a regular file, ``lines`` counts the lines in it, and the first failure is kept
/// (``failureMessage``); later lines are not written. Lines are buffered up to `flushBytes`
/// (0: each line goes out as it comes). Used by `--metadata` files of `run` and `process`.
package final class WholeLineFile {
    package let path: String
    private var fd: Int32
    private let flushBytes: Int
    private var buffer: [UInt8] = []
    private var bufferedLines = 0
    private var written = 0
    /// Lines in the file (whole lines only).
    package private(set) var lines = 0
    /// The `errno` of the write that failed; nothing more is written after it.
    package private(set) var failure: Int32?

    /// Writes to `fd` (owned: closed by ``close()``) named `path` in messages.
    package init(path: String, fd: Int32, flushBytes: Int) {
        self.path = path
        self.fd = fd
        self.flushBytes = flushBytes
        buffer.reserveCapacity(max(flushBytes, 0) + 4096)
    }

    /// "writing the metadata file 'PATH' failed after N lines: REASON", once a write failed.
    package var failureMessage: String? {
        failure.map { "writing the metadata file '\(path)' failed after \(lines) lines: \(String(cString: strerror($0)))" }
    }

    /// Adds one line (`line` without its newline). False once writing has failed.
    @discardableResult
    package func append(_ line: String) -> Bool {
        guard failure == nil, fd >= 0 else { return false }
        buffer.append(contentsOf: line.utf8)
        buffer.append(0x0A)
        bufferedLines += 1
        if buffer.count >= flushBytes { return flush() }
        return true
    }

    /// Writes the buffered lines. False once writing has failed.
    @discardableResult
    package func flush() -> Bool {
        guard failure == nil, fd >= 0 else { return false }
        guard !buffer.isEmpty else { return true }
        var done = 0
        let error = buffer.withUnsafeBytes { DescriptorWrite.all(fd, $0.baseAddress!, $0.count, written: &done) }
        if let error {
            // The whole lines among the bytes that went out stay; a torn one is cut off.
            let whole = buffer[..<done].lastIndex(of: 0x0A).map { $0 + 1 } ?? 0
            lines += buffer[..<whole].reduce(0) { $0 + ($1 == 0x0A ? 1 : 0) }
            if whole < done { DescriptorWrite.cutRegularFile(fd, to: written + whole) }
            written += whole
            failure = error
        } else {
            lines += bufferedLines
            written += done
        }
        buffer.removeAll(keepingCapacity: true)
        bufferedLines = 0
        return error == nil
    }

    /// Writes what is buffered and closes the file.
    package func close() {
        guard fd >= 0 else { return }
        flush()
        Glibc.close(fd)
        fd = -1
    }

    deinit { close() }
}
