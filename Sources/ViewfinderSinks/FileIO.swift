#if canImport(Glibc)
import Glibc
#endif
import Foundation
import Synchronization
import Viewfinder

/// A seam for tests of slow storage: makes every write, `pwrite` and `fdatasync` of the sinks'
/// files under a directory block until a monotonic time, as a throttled disk or a
/// seconds-long `fsync` would. The product's own write path runs; only the system call is held
/// back. Off (one relaxed atomic load per call) unless a test sets it.
package enum StorageStalls {
    private static let active = Atomic<Bool>(false)
    private static let stalls = LockedBox<[(directory: String, until: UInt64)]>([])

    /// Writes to files under `directory` block until `monotonicNanoseconds() >= until`.
    package static func stall(directory: String, until: UInt64) {
        let dir = directory.hasSuffix("/") ? directory : directory + "/"
        stalls.withLock { s in
            s.removeAll { $0.directory == dir }
            s.append((dir, until))
        }
        active.store(true, ordering: .releasing)
    }

    /// Ends the stall of `directory` now (writes blocked there go on).
    package static func end(directory: String) {
        let dir = directory.hasSuffix("/") ? directory : directory + "/"
        let none = stalls.withLock { s in s.removeAll { $0.directory == dir }; return s.isEmpty }
        if none { active.store(false, ordering: .releasing) }
    }

    /// Called before each buffer written (`DescriptorWrite.all`
    /// writes it whole) and each `fdatasync`.
    @inline(__always)
    static func wait(path: String) {
        guard active.load(ordering: .acquiring) else { return }
        while true {
            let until = stalls.withLock { s in s.first { path.hasPrefix($0.directory) }?.until ?? 0 }
            let now = monotonicNanoseconds()
            guard until > now else { return }
            usleep(UInt32(min(until - now, 20_000_000) / 1000))
        }
    }
}

/// A file descriptor opened for writing, with full-write loops and typed errors.
///
/// Not shared between threads: each writer owns its file.
final class OutputFile {
    let path: String
    let fd: Int32
    /// Bytes written so far (the end of the last complete write).
    private(set) var offset: UInt64 = 0

    /// Opens `path` for writing. `exclusive` fails when the file exists (O_EXCL). With
    /// `regularFile` (movies and dumps, which are patched in place as they grow), anything at
    /// `path` that is not a regular file — a device, a fifo, a folder — is refused before it is
    /// opened, and the file is then known to be one this writer may remove (``discard()``). A
    /// file another program is writing (a second command given the same output, asked to
    /// overwrite) is refused, untouched (``SinkError/fileInUse(path:pid:)``); the writer holds
    /// its file so for as long as it has it open.
    init(path: String, exclusive: Bool, truncate: Bool = true, regularFile: Bool = false) throws {
        self.path = path
        if regularFile { try PatchedFile.refuseNonRegular(path) }
        var flags = O_WRONLY | O_CREAT | O_CLOEXEC
        if exclusive { flags |= O_EXCL }
        let fd = open(path, flags, 0o644)
        if fd < 0 {
            if errno == EEXIST { throw SinkError.fileExists(path: path) }
            throw SinkError.fromErrno(path: path, operation: "open")
        }
        switch StreamFile.claim(fd, truncating: truncate) {
        case .claimed: break
        case .heldBy(let pid): close(fd); throw SinkError.fileInUse(path: path, pid: pid)
        case .truncateFailed(let e): close(fd); throw SinkError.fromErrno(path: path, operation: "ftruncate", errno: e)
        }
        self.fd = fd
    }

    /// Opens the device or fifo at `path` to write into it (never creating or replacing a file):
    /// non-blocking, so a fifo with no reader is an error at once rather than a wait for ever
    /// (as `run --output` opens one), then blocking for the writes. What is there when it opens
    /// must be a device or a fifo — a regular file put there since the caller looked is refused
    /// as existing, not written over in place.
    init(intoDeviceAt path: String) throws {
        self.path = path
        let fd = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        if fd < 0 {
            let e = errno
            if e == ENXIO { throw SinkError.io(path: path, operation: "open", errno: e, message: "a fifo with no reader (start the reader first)") }
            throw SinkError.fromErrno(path: path, operation: "open", errno: e)
        }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFCHR || st.st_mode & S_IFMT == S_IFIFO else {
            close(fd)
            throw SinkError.fileExists(path: path)
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK)
        self.fd = fd
    }

    deinit { close(fd) }

    /// Removes the file this writer made when it fails before anything worth keeping is in it —
    /// only if `path` is still a regular file and the one this descriptor has open (never a
    /// device node or a file put there since).
    func discard() {
        var a = stat(), b = stat()
        guard fstat(fd, &a) == 0, lstat(path, &b) == 0, b.st_mode & S_IFMT == S_IFREG,
              a.st_dev == b.st_dev, a.st_ino == b.st_ino else { return }
        unlink(path)
    }

    /// Writes all of `buffer` at the current end. On failure the file is cut back to where it was,
    /// so that it never ends in a half-written record.
    func write(_ buffer: UnsafeRawBufferPointer) throws {
        try writev([buffer])
    }

    /// Writes the buffers in order, as one logical record: all of them or (after a failure and
    /// truncation back) none.
    func writev(_ buffers: [UnsafeRawBufferPointer]) throws {
        let start = offset
        var done: UInt64 = 0
        for b in buffers where b.count > 0 {
            StorageStalls.wait(path: path)
            var n = 0
            if let e = DescriptorWrite.all(fd, b.baseAddress!, b.count, written: &n) {
                cutBack(to: start)
                throw SinkError.fromErrno(path: path, operation: "write", errno: e)
            }
            done += UInt64(n)
        }
        offset = start + done
    }

    /// Cuts the file to `end` bytes and makes it the end of the next write (reopening a file to
    /// append after its last complete record).
    func cut(to end: UInt64) throws {
        guard ftruncate(fd, off_t(end)) == 0 else { throw SinkError.fromErrno(path: path, operation: "ftruncate") }
        guard lseek(fd, off_t(end), SEEK_SET) == off_t(end) else { throw SinkError.fromErrno(path: path, operation: "lseek") }
        offset = end
    }

    /// Makes `end` (past bytes written with ``pwrite(_:at:)``) the end of the data and of the next
    /// write.
    func moveEnd(to end: UInt64) throws {
        guard lseek(fd, off_t(end), SEEK_SET) == off_t(end) else { throw SinkError.fromErrno(path: path, operation: "lseek") }
        offset = end
    }

    /// After a failed write at the end: the file is cut back to `start` (best effort; the error
    /// being handled is the one to report).
    func cutBack(to start: UInt64) {
        _ = ftruncate(fd, off_t(start))
        _ = lseek(fd, off_t(start), SEEK_SET)
        offset = start
    }

    /// Overwrites bytes at an absolute offset (patching a header) without moving the end.
    func pwrite(_ buffer: UnsafeRawBufferPointer, at position: UInt64) throws {
        guard let p = buffer.baseAddress, buffer.count > 0 else { return }
        StorageStalls.wait(path: path)
        var n = 0
        if let e = DescriptorWrite.all(fd, p, buffer.count, at: position, written: &n) {
            throw SinkError.fromErrno(path: path, operation: "pwrite", errno: e)
        }
    }

    func sync() throws {
        StorageStalls.wait(path: path)
        if fdatasync(fd) != 0 { throw SinkError.fromErrno(path: path, operation: "fdatasync") }
    }
}

/// A file written and patched in place as it grows — a movie, a dump — which must be a regular
/// file (never a device, a fifo or a folder).
public enum PatchedFile {
    /// Throws when something that is not a regular file (a device, a fifo, a folder) is at `path`.
    static func refuseNonRegular(_ path: String) throws {
        var st = stat()
        guard stat(path, &st) == 0, st.st_mode & S_IFMT != S_IFREG else { return }
        let kind: String
        switch st.st_mode & S_IFMT {
        case S_IFCHR: kind = "a character device"
        case S_IFBLK: kind = "a block device"
        case S_IFIFO: kind = "a fifo"
        case S_IFDIR: kind = "a folder"
        default: kind = "not a regular file"
        }
        throw SinkError.invalidArgument(name: "path", reason: "'\(path)' is \(kind): this file is patched in place as it is written and needs a regular file")
    }

    /// Checks, before anything is captured, that a movie or a dump can be created at `path`
    /// (the rule its writer opens it by): nothing but a regular file there, and a folder that
    /// exists and takes new files, and no other program writing the file. Changes nothing.
    /// - Throws: ``SinkError`` naming `path`.
    public static func checkWritable(_ path: String) throws {
        try refuseNonRegular(path)
        // An existing file is opened in place: its own permission counts. A new one is created
        // where a link points, in that folder.
        if access(path, F_OK) == 0 {
            guard access(path, W_OK) == 0 else { throw SinkError.fromErrno(path: path, operation: "open") }
            // Another program writing it (a second command given the same output) is said now,
            // before the camera opens, not when the output starts.
            if let pid = StreamFile.writer(of: path) { throw SinkError.fileInUse(path: path, pid: pid) }
            return
        }
        let folder = PathName.folder(of: StreamFile.resolvingLink(path))
        if let r = StreamFile.newFileRefusal(in: folder) {
            throw SinkError.fromErrno(path: path, operation: r.permission ? "create a file in '\(folder)'" : "open", errno: r.errno)
        }
    }
}

/// Writes files atomically: the data goes to a temporary file in the same directory, is flushed,
/// and is then renamed into place. Readers never see a half-written file, and a crash leaves either
/// the old state or the whole new file (plus, at worst, a stray `.tmp`).
public enum AtomicFile {
    /// Writes `bytes` to `path`. Without `overwrite`, an existing file is an error
    /// (``SinkError/fileExists(path:)``), checked atomically at the rename (`link`+`unlink`).
    ///
    /// A symbolic link is kept: its target is written (atomically). A path that is not a regular
    /// file — a device such as `/dev/stdout`'s terminal, a fifo — is written into, not replaced by
    /// a file, with or without `overwrite` (nothing in it is replaced).
    public static func write(_ bytes: UnsafeRawBufferPointer, to path: String, overwrite: Bool = false) throws {
        let named = path
        let path = resolvingLink(path)
        var st = stat()
        let exists = stat(path, &st) == 0
        let kind = st.st_mode & S_IFMT
        if !overwrite && access(named, F_OK) == 0 && (!exists || kind == S_IFREG || kind == S_IFDIR) { throw SinkError.fileExists(path: named) }
        if exists, kind != S_IFREG, kind != S_IFDIR {
            guard kind != S_IFBLK else { throw SinkError.invalidArgument(name: "path", reason: "'\(path)' is a block device") }
            let f = try OutputFile(intoDeviceAt: path)
            try f.write(bytes)
            return
        }
        let tmp = PathName.folder(of: path) + "/.\(PathName.lastComponent(path)).\(getpid()).\(UInt32.random(in: 0...UInt32.max)).tmp"
        do {
            let f = try OutputFile(path: tmp, exclusive: true)
            try f.write(bytes)
            try f.sync()
        } catch {
            unlink(tmp)
            // The user named `path`: say that (the temporary file's name means nothing to them).
            if let e = error as? SinkError { throw e.naming(path, insteadOf: tmp) }
            throw error
        }
        if overwrite {
            if rename(tmp, path) != 0 {
                let e = errno; unlink(tmp)
                throw SinkError.fromErrno(path: path, operation: "rename", errno: e)
            }
        } else {
            // link() fails with EEXIST if someone created the file meanwhile: never clobbers it.
            if link(tmp, path) != 0 {
                let e = errno
                if e == EEXIST { unlink(tmp); throw SinkError.fileExists(path: path) }
                if e == EPERM || e == EOPNOTSUPP || e == ENOSYS {
                    // No hard links here (FAT/exFAT memory cards): check, then rename.
                    if access(path, F_OK) == 0 { unlink(tmp); throw SinkError.fileExists(path: path) }
                    if rename(tmp, path) != 0 {
                        let e2 = errno; unlink(tmp)
                        throw SinkError.fromErrno(path: path, operation: "rename", errno: e2)
                    }
                } else {
                    unlink(tmp)
                    throw SinkError.fromErrno(path: path, operation: "link", errno: e)
                }
            } else {
                unlink(tmp)
            }
        }
        syncDirectory(of: path)
    }

    /// Checks, before anything is captured, that `write(_:to:overwrite:)` can write `path`,
    /// changing nothing: where it will land (a link's target) must be a regular file or a new name
    /// in a folder that exists and takes new files (the temporary file and the rename need the
    /// folder, not the old file's permission), or a fifo or character device this process may
    /// write. A folder or a block device is refused.
    /// - Throws: ``SinkError/invalidArgument(name:reason:)`` for a folder or a block device,
    ///   ``SinkError/io(path:operation:errno:message:)`` otherwise, naming `path`.
    public static func checkWritable(_ path: String) throws {
        func refuse(_ e: Int32, _ what: String = "open") -> SinkError { .fromErrno(path: path, operation: what, errno: e) }
        let target = resolvingLink(path)
        var st = stat()
        if stat(target, &st) == 0 {
            switch st.st_mode & S_IFMT {
            case S_IFDIR: throw SinkError.invalidArgument(name: "path", reason: "'\(path)' is a folder; give a file name in it")
            case S_IFBLK: throw SinkError.invalidArgument(name: "path", reason: "'\(path)' is a block device")
            case S_IFREG: break
            default:
                // Written into: its own permission counts.
                guard access(target, W_OK) == 0 else { throw refuse(errno) }
                return
            }
        }
        let folder = PathName.folder(of: target)
        if let r = StreamFile.newFileRefusal(in: folder) { throw refuse(r.errno, r.permission ? "create a file in '\(folder)'" : "open") }
    }

    /// The file a symbolic link at `path` points to, link after link, by the kernel's own rules
    /// (`StreamFile.resolvingLink(_:)`, where it is documented), else `path`.
    public static func resolvingLink(_ path: String) -> String { StreamFile.resolvingLink(path) }

    public static func write(_ bytes: [UInt8], to path: String, overwrite: Bool = false) throws {
        try bytes.withUnsafeBytes { try write($0, to: path, overwrite: overwrite) }
    }

    /// Flushes the directory entry (so a rename survives a power cut).
    static func syncDirectory(of path: String) {
        let fd = open(PathName.folder(of: path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 { _ = fsync(fd); close(fd) }
    }
}

/// Free bytes for unprivileged users on the file system holding `path` (its directory if the file
/// does not exist yet); nil if it cannot be determined.
public func freeDiskSpace(at path: String) -> UInt64? {
    var st = statvfs()
    var p = path
    if access(p, F_OK) != 0 { p = PathName.folder(of: path) }
    guard statvfs(p, &st) == 0 else { return nil }
    return UInt64(st.f_bavail) &* UInt64(st.f_frsize)
}
