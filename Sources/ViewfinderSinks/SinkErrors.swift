#if canImport(Glibc)
import Glibc
#endif

/// Errors from the sinks: file I/O, encoding, and bad input. Each names the file or the culprit.
public enum SinkError: Error, Equatable, CustomStringConvertible {
    /// The output file exists and overwriting was not asked for.
    case fileExists(path: String)
    /// Another program is writing the file (a second command given the same output): it was
    /// left as it was. `pid` is that program's, when the system says.
    case fileInUse(path: String, pid: Int32?)
    /// A system call on a file failed.
    case io(path: String, operation: String, errno: Int32, message: String)
    /// The disk (or the file system) is full (ENOSPC / EDQUOT).
    case diskFull(path: String)
    /// The encoder cannot take frames of this format.
    case unsupportedFormat(String)
    /// TurboJPEG reported an error.
    case jpeg(operation: String, message: String)
    /// The input data is not what it claims to be (a JPEG that does not parse, a record that does not decode).
    case corruptData(String)
    /// An argument is out of its range.
    case invalidArgument(name: String, reason: String)

    public var description: String {
        switch self {
        case .fileExists(let p): return "'\(p)' exists; refusing to overwrite it (ask to overwrite explicitly, e.g. --force)"
        case .fileInUse(let p, let pid): return "'\(p)' is being written by another program\(pid.map { " (pid \($0))" } ?? ""); it was left as it is"
        case .io(let p, let op, let e, let m): return "'\(p)': \(op) failed: \(m) (errno \(e))"
        case .diskFull(let p): return "'\(p)': no space left on the device"
        case .unsupportedFormat(let s): return "unsupported format: \(s)"
        case .jpeg(let op, let m): return "TurboJPEG \(op) failed: \(m)"
        case .corruptData(let s): return "corrupt data: \(s)"
        case .invalidArgument(let n, let r): return "invalid \(n): \(r)"
        }
    }

    /// The same error about `path` where it names `other` (a temporary file written for `path`).
    func naming(_ path: String, insteadOf other: String) -> SinkError {
        switch self {
        case .io(let p, let op, let e, let m) where p == other: return .io(path: path, operation: op, errno: e, message: m)
        case .diskFull(let p) where p == other: return .diskFull(path: path)
        default: return self
        }
    }

    /// The error for a failed system call with the current `errno`.
    static func fromErrno(path: String, operation: String, errno e: Int32 = errno) -> SinkError {
        if e == ENOSPC || e == EDQUOT { return .diskFull(path: path) }
        return .io(path: path, operation: operation, errno: e, message: String(cString: strerror(e)))
    }
}
