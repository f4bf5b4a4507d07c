#if canImport(Glibc)
import Glibc
#endif

/// The one rule for a file a stream of lines or frames is written into (per-frame metadata, a
/// processed y4m's metadata): opened in place as a shell's `>` opens it — created, or truncated;
/// a fifo or a device (`/dev/stdout`'s terminal, `/dev/null`) is written into, never replaced by
/// a file — and without waiting for a fifo's reader: a fifo nobody reads is an error at once,
/// not a thread blocked in `open()` for ever (a run could then never end, Ctrl-C included).
///
/// (Whole files written at once — stills, reports — go through `AtomicFile` in ViewfinderSinks,
/// which replaces a regular file atomically and writes into a fifo or a device by the same rule.)
public enum StreamFile {
    /// Opens `path` for writing by the rule above. Returns a blocking, close-on-exec descriptor
    /// the caller closes.
    /// - Throws: ``DeviceError/io(device:operation:errno:message:)`` naming `path`; a fifo with
    ///   no reader (ENXIO) is said as such.
    public static func openForWriting(_ path: String) throws -> Int32 {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw openError(path, errno) }
        // Writes block as usual.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return fd
    }

    /// Checks, before a run, that ``openForWriting(_:)`` will be able to open `path`, changing
    /// nothing: a missing file is not created (its folder must exist and take new files), an
    /// existing file is opened without truncating it, and a fifo or a device is checked for
    /// permission only (opening and closing a fifo would end its reader's stream before the
    /// writer starts). A folder is refused.
    /// - Throws: the error ``openForWriting(_:)`` would throw.
    public static func checkWritable(_ path: String) throws {
        var st = stat()
        guard stat(path, &st) == 0 else {
            let e = errno
            guard e == ENOENT else { throw openError(path, e) }
            let slash = path.lastIndex(of: "/")
            let folder = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
            var fst = stat()
            guard stat(folder, &fst) == 0 else { throw openError(path, errno) }
            guard fst.st_mode & S_IFMT == S_IFDIR else { throw openError(path, ENOTDIR) }
            guard access(folder, W_OK | X_OK) == 0 else { throw openError(path, errno) }
            return
        }
        switch st.st_mode & S_IFMT {
        case S_IFDIR:
            throw openError(path, EISDIR)
        case S_IFREG:
            let fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else { throw openError(path, errno) }
            close(fd)
        default:
            guard access(path, W_OK) == 0 else { throw openError(path, errno) }
        }
    }

    static func openError(_ path: String, _ e: Int32) -> DeviceError {
        let message = e == ENXIO ? "a fifo with no reader (start the reader first)" : String(cString: strerror(e))
        return DeviceError.io(device: path, operation: "open for writing", errno: e, message: message)
    }
}
