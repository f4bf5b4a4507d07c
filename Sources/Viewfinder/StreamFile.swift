import Foundation
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
    /// Whether `path` (through its links) is a character device or a fifo: what an output writes
    /// into rather than replaces, so no `--force` is asked for it.
    public static func isWrittenInto(_ path: String) -> Bool {
        var st = stat()
        guard stat(path, &st) == 0 else { return false }
        return st.st_mode & S_IFMT == S_IFCHR || st.st_mode & S_IFMT == S_IFIFO
    }

    /// Opens `path` for writing by the rule above. Returns a blocking, close-on-exec descriptor
    /// the caller closes.
    /// - Throws: ``StreamFileError/cannotOpen(path:errno:message:)``; a fifo with no reader
    ///   (ENXIO) is said as such.
    ///   A regular file another program is writing (a second command given the same output) is
    ///   refused with `EBUSY` before it is truncated (it holds a POSIX write lock on the file).
    public static func openForWriting(_ path: String) throws -> Int32 {
        let fd = open(path, O_WRONLY | O_CREAT | O_NONBLOCK | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw openError(path, errno) }
        switch claim(fd, truncating: true) {
        case .claimed: break
        case .heldBy(let pid): close(fd); throw StreamFileError.cannotOpen(path: path, errno: EBUSY, message: busyMessage(pid))
        case .truncateFailed(let e): close(fd); throw openError(path, e)
        }
        // Writes block as usual.
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        return fd
    }

    /// What ``claim(_:truncating:)`` found.
    package enum FileClaim: Equatable {
        /// This process writes the file now (or it is not a regular file: a fifo, a device).
        case claimed
        /// Another process is writing it (its pid, when the system says): left untouched.
        case heldBy(pid_t?)
        /// Locked, but cutting it to empty failed (`errno`).
        case truncateFailed(Int32)
    }

    /// Makes the file open at `fd` this writer's, as every output opened for writing does: a
    /// regular file is locked (``lockForWriting(_:)``) and only then, with `truncating`, cut to
    /// empty — never one another program is writing. (Opened without `O_TRUNC`, which would cut
    /// it before the lock is asked for.)
    package static func claim(_ fd: Int32, truncating: Bool) -> FileClaim {
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { return .claimed }
        if let holder = lockForWriting(fd) { return .heldBy(holder) }
        if truncating, ftruncate(fd, 0) != 0 { return .truncateFailed(errno) }
        return .claimed
    }

    /// Whether another process is writing the regular file at `path` (holds the write lock our
    /// writers take), and its pid when the system says — the check before a run, which changes
    /// nothing (it opens the file read-only and closes it: this process holds no lock on a file
    /// it has not started writing). Nil when no one is, or it cannot be told.
    package static func writer(of path: String) -> pid_t?? {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG else { return nil }
        return lockHolder(fd)
    }

    /// Who holds a lock that keeps a write lock on the whole file at `fd` from this process: nil
    /// when no one does; `.some(nil)` when someone does and the system does not say who.
    private static func lockHolder(_ fd: Int32) -> pid_t?? {
        var probe = flock()
        probe.l_type = Int16(F_WRLCK)
        probe.l_whence = Int16(SEEK_SET)
        guard fcntl(fd, F_GETLK, &probe) == 0, probe.l_type != Int16(F_UNLCK) else { return nil }
        return .some(probe.l_pid > 0 ? probe.l_pid : nil)
    }

    /// How a file another program writes is said.
    package static func busyMessage(_ pid: pid_t?) -> String {
        pid.map { "another program (pid \($0)) is writing it" } ?? "another program is writing it"
    }

    /// Takes a write lock on the whole file open at `fd` (a POSIX record lock: released when the
    /// process closes the file, or ends), so that another process writing the same output —
    /// a second command given it — is found before either truncates what the other wrote.
    /// Returns the process holding the file (nil when this one has it, or the file system takes
    /// no locks; `.some(nil)` when it is held and the system does not say by whom). This process's own descriptors never conflict: a writer that reopens its
    /// file (a dump going on after the camera came back) keeps it.
    package static func lockForWriting(_ fd: Int32) -> pid_t?? {
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 0
        lock.l_len = 0
        for _ in 0..<2 {
            guard fcntl(fd, F_SETLK, &lock) != 0, errno == EAGAIN || errno == EACCES else { return nil }
            // Let go of between the two calls: ask once more.
            if let holder = lockHolder(fd) { return holder }
        }
        return .some(nil)
    }

    /// Checks, before a run, that ``openForWriting(_:)`` will be able to open `path`, changing
    /// nothing: a missing file is not created (its folder must exist and take new files), an
    /// existing file is opened without truncating it, and a fifo or a device is checked for
    /// permission only (opening and closing a fifo would end its reader's stream before the
    /// writer starts). A folder is refused.
    /// - Throws: the error ``openForWriting(_:)`` would throw.
    public static func checkWritable(_ path: String) throws {
        // Where the open will land: a link is followed as the kernel follows it (a link into a
        // missing folder is refused here, not found after another file was truncated).
        let path = resolvingLink(path)
        var st = stat()
        guard stat(path, &st) == 0 else {
            let e = errno
            guard e == ENOENT else { throw openError(path, e) }
            if let refused = newFileRefusal(in: PathName.folder(of: path)) { throw openError(path, refused.errno) }
            return
        }
        switch st.st_mode & S_IFMT {
        case S_IFDIR:
            throw openError(path, EISDIR)
        case S_IFREG:
            let fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else { throw openError(path, errno) }
            close(fd)
            if let pid = writer(of: path) { throw StreamFileError.cannotOpen(path: path, errno: EBUSY, message: busyMessage(pid)) }
        default:
            guard access(path, W_OK) == 0 else { throw openError(path, errno) }
        }
    }

    /// The file a symbolic link at `path` points to, link after link (at most 40: a loop is left
    /// as it is), else `path`. Only links the kernel itself would follow for this process are
    /// followed (`fs.protected_symlinks`: in a sticky, world-writable folder such as /tmp, a link
    /// owned by someone else — neither this user nor the folder's owner — is not), so another
    /// user's link cannot aim a write at this user's files (`AtomicFile` replaces such a link).
    public static func resolvingLink(_ path: String) -> String {
        var current = path
        for _ in 0..<40 {
            var lst = stat()
            guard lstat(current, &lst) == 0, lst.st_mode & S_IFMT == S_IFLNK else { return current }
            let dir = PathName.folder(of: current)
            var dst = stat()
            if stat(dir, &dst) == 0, dst.st_mode & S_ISVTX != 0, dst.st_mode & S_IWOTH != 0,
               lst.st_uid != geteuid(), lst.st_uid != dst.st_uid {
                return path
            }
            var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
            let n = readlink(current, &buf, buf.count - 1)
            guard n > 0 else { return path }
            let target = String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            current = target.hasPrefix("/") ? target : dir + "/" + target
        }
        return path
    }

    /// Why a new file cannot be created in `folder` — it is missing, is not a folder, or this
    /// process may not add to it (`permission`) — as the errno an open would meet; nil when it
    /// can. The one folder check of the outputs' pre-flight checks (`StreamFile`, and
    /// ViewfinderSinks' `AtomicFile` and `PatchedFile`).
    public static func newFileRefusal(in folder: String) -> (errno: Int32, permission: Bool)? {
        var st = stat()
        guard stat(folder, &st) == 0 else { return (errno, false) }
        guard st.st_mode & S_IFMT == S_IFDIR else { return (ENOTDIR, false) }
        guard access(folder, W_OK | X_OK) == 0 else { return (errno, true) }
        return nil
    }

    static func openError(_ path: String, _ e: Int32) -> StreamFileError {
        let message = e == ENXIO ? "a fifo with no reader (start the reader first)" : String(cString: strerror(e))
        return .cannotOpen(path: path, errno: e, message: message)
    }
}

/// Why a stream file (``StreamFile``) cannot be opened: names the file, not a device.
public enum StreamFileError: Error, Equatable, CustomStringConvertible {
    case cannotOpen(path: String, errno: Int32, message: String)

    public var description: String {
        switch self {
        case .cannotOpen(let p, let e, let m): return "cannot open '\(p)' for writing: \(m) (errno \(e))"
        }
    }
}
