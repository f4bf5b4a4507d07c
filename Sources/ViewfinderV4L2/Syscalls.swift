#if canImport(Glibc)
import Glibc
#endif
import CV4L2
import Viewfinder

/// An error number from a system call (the swift-system `Errno` shape, without the dependency).
public struct Errno: Error, Equatable, Hashable, Sendable, CustomStringConvertible {
    public var rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    /// The calling thread's current `errno`.
    public static var current: Errno { Errno(rawValue: errno) }

    public static let interrupted = Errno(rawValue: EINTR)
    public static let wouldBlock = Errno(rawValue: EAGAIN)
    public static let invalidArgument = Errno(rawValue: EINVAL)
    public static let busy = Errno(rawValue: EBUSY)
    public static let noSpace = Errno(rawValue: ENOSPC)
    public static let noDevice = Errno(rawValue: ENODEV)
    public static let ioError = Errno(rawValue: EIO)
    public static let noEntry = Errno(rawValue: ENOENT)
    public static let permissionDenied = Errno(rawValue: EACCES)
    public static let notPermitted = Errno(rawValue: EPERM)
    public static let badFile = Errno(rawValue: EBADF)
    public static let notTTY = Errno(rawValue: ENOTTY)
    public static let outOfRange = Errno(rawValue: ERANGE)
    public static let noMemory = Errno(rawValue: ENOMEM)
    public static let pipe = Errno(rawValue: EPIPE)
    public static let noDeviceOrAddress = Errno(rawValue: ENXIO)

    /// The system's text for the error (`strerror`).
    public var message: String { String(cString: strerror(rawValue)) }
    public var description: String { message + " (errno \(rawValue))" }

    /// Whether the error means the device is gone (unplugged).
    public var meansDisconnected: Bool { self == .noDevice || self == .ioError || self == .noDeviceOrAddress }
}

/// `poll(2)` event bits.
public struct PollEvents: OptionSet, Sendable, Hashable {
    public var rawValue: Int16
    public init(rawValue: Int16) { self.rawValue = rawValue }
    public static let input = PollEvents(rawValue: Int16(POLLIN))
    public static let priority = PollEvents(rawValue: Int16(POLLPRI))
    public static let error = PollEvents(rawValue: Int16(POLLERR))
    public static let hangup = PollEvents(rawValue: Int16(POLLHUP))
    public static let invalid = PollEvents(rawValue: Int16(POLLNVAL))
}

/// The system calls the V4L2 backend makes, replaceable so tests can run against a fake kernel.
///
/// Implementations report failure as `.failure(Errno)` and do **not** retry `EINTR`: the backend
/// retries interrupted calls in exactly one place (`retryingInterrupts(_:)`).
public protocol V4L2Syscalls: AnyObject, Sendable {
    func open(_ path: String, flags: Int32) -> Result<Int32, Errno>
    func close(_ fd: Int32) -> Result<Void, Errno>
    /// `ioctl(fd, request, arg)`; returns the call's non-negative result.
    func ioctl(_ fd: Int32, _ request: UInt, _ arg: UnsafeMutableRawPointer) -> Result<Int32, Errno>
    func mmap(length: Int, fd: Int32, offset: Int) -> Result<UnsafeMutableRawPointer, Errno>
    func munmap(_ address: UnsafeMutableRawPointer, length: Int) -> Result<Void, Errno>
    /// Waits for `events` on `fd` up to `timeoutMilliseconds` (-1: forever); returns the events
    /// that happened (empty on timeout).
    func poll(_ fd: Int32, events: PollEvents, timeoutMilliseconds: Int32) -> Result<PollEvents, Errno>
    /// Names in a directory (for `/dev` and `/dev/v4l/by-*`); empty when it does not exist.
    func listDirectory(_ path: String) -> [String]
    /// Where a symbolic link points, resolved to an absolute path; nil if it is not a link.
    func resolveLink(_ path: String) -> String?
}

/// Retries a call while it fails with `EINTR`. The single place interrupted calls are retried.
@inline(__always)
func retryingInterrupts<T>(_ body: () -> Result<T, Errno>) -> Result<T, Errno> {
    while true {
        let r = body()
        if case .failure(let e) = r, e == .interrupted { continue }
        return r
    }
}

/// The real kernel: plain system calls.
public final class LinuxSyscalls: V4L2Syscalls {
    // Stateless; every call goes straight to the kernel, which is thread-safe.
    public static let shared = LinuxSyscalls()
    public init() {}

    public func open(_ path: String, flags: Int32) -> Result<Int32, Errno> {
        let fd = vf_open(path, flags)
        return fd >= 0 ? .success(fd) : .failure(.current)
    }

    public func close(_ fd: Int32) -> Result<Void, Errno> {
        Glibc.close(fd) == 0 ? .success(()) : .failure(.current)
    }

    @inline(__always)
    public func ioctl(_ fd: Int32, _ request: UInt, _ arg: UnsafeMutableRawPointer) -> Result<Int32, Errno> {
        let r = vf_ioctl(fd, request, arg)
        return r >= 0 ? .success(r) : .failure(.current)
    }

    public func mmap(length: Int, fd: Int32, offset: Int) -> Result<UnsafeMutableRawPointer, Errno> {
        let p = Glibc.mmap(nil, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off_t(offset))
        guard let p, p != MAP_FAILED else { return .failure(.current) }
        return .success(p)
    }

    public func munmap(_ address: UnsafeMutableRawPointer, length: Int) -> Result<Void, Errno> {
        Glibc.munmap(address, length) == 0 ? .success(()) : .failure(.current)
    }

    public func poll(_ fd: Int32, events: PollEvents, timeoutMilliseconds: Int32) -> Result<PollEvents, Errno> {
        var p = pollfd(fd: fd, events: events.rawValue, revents: 0)
        let r = Glibc.poll(&p, 1, timeoutMilliseconds)
        if r < 0 { return .failure(.current) }
        return .success(r == 0 ? [] : PollEvents(rawValue: p.revents))
    }

    public func listDirectory(_ path: String) -> [String] {
        guard let dir = opendir(path) else { return [] }
        defer { closedir(dir) }
        var names: [String] = []
        while let e = readdir(dir) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }

    public func resolveLink(_ path: String) -> String? {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink(path, &buf, buf.count - 1)
        guard n > 0 else { return nil }
        let target = String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if target.hasPrefix("/") { return normalizePath(target) }
        let dir = path.split(separator: "/", omittingEmptySubsequences: false).dropLast().joined(separator: "/")
        return normalizePath(dir + "/" + target)
    }
}

/// Collapses `.` and `..` in an absolute path.
func normalizePath(_ path: String) -> String {
    var parts: [Substring] = []
    for c in path.split(separator: "/") {
        if c == "." { continue }
        if c == ".." { if !parts.isEmpty { parts.removeLast() }; continue }
        parts.append(c)
    }
    return "/" + parts.joined(separator: "/")
}
