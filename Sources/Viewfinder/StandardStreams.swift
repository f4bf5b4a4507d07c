#if canImport(Glibc)
import Glibc
#endif

/// Writes to standard output and standard error that cannot stop the program.
///
/// Foundation's `FileHandle.write(_:)` traps when the write fails (a log redirected to a disk that
/// has just filled: `2>>log`, `2>/dev/full`; a closed descriptor: `2>&-`), which turned a message
/// — even the one-line error of a failed command, or a success's summary — into a crash (SIGILL,
/// 2 Dec sweep). These write what they can and drop the rest: the exit status still tells.
package enum StandardStreams {
    /// Writes `text` to standard error (descriptor 2), whole or as far as it goes.
    package static func error(_ text: String) { write(2, text) }

    /// Writes `text` to standard output (descriptor 1), whole or as far as it goes.
    package static func output(_ text: String) { write(1, text) }

    private static func write(_ fd: Int32, _ text: String) {
        var bytes = Array(text.utf8)
        var written = 0
        _ = bytes.withUnsafeMutableBytes { DescriptorWrite.all(fd, $0.baseAddress!, $0.count, written: &written) }
    }
}
