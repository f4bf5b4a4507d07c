import CLibFuzzer
import Glibc

/// Runs libFuzzer with the process's command line, calling `body` once per input.
///
/// SwiftPM names an executable's entry point `<Target>_main` and defines `main` as that symbol,
/// so libFuzzer's own `main` cannot be used: each target has an `@main` that calls this, and
/// this calls `LLVMFuzzerRunDriver`.
public enum FuzzDriver {
    /// The current target's body. Written once before the driver starts; libFuzzer calls it from
    /// the main thread only.
    nonisolated(unsafe) static var body: (UnsafeRawBufferPointer) -> Void = { _ in }

    public static func run(_ body: @escaping (UnsafeRawBufferPointer) -> Void) -> Never {
        FuzzDriver.body = body
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        let status = LLVMFuzzerRunDriver(&argc, &argv) { data, size in
            FuzzDriver.body(UnsafeRawBufferPointer(start: data, count: size))
            return 0
        }
        exit(status)
    }
}

/// Reads the fuzzer's bytes as a little stream of choices followed by a payload.
public struct FuzzInput {
    public let bytes: UnsafeRawBufferPointer
    public private(set) var position = 0

    public init(_ bytes: UnsafeRawBufferPointer) { self.bytes = bytes }

    public var remaining: UnsafeRawBufferPointer { UnsafeRawBufferPointer(rebasing: bytes[position...]) }
    public var isEmpty: Bool { position >= bytes.count }

    /// The next byte, or 0 past the end.
    public mutating func byte() -> UInt8 {
        guard position < bytes.count else { return 0 }
        defer { position += 1 }
        return bytes[position]
    }

    /// The next `T`, little-endian, zero-padded past the end.
    public mutating func integer<T: FixedWidthInteger>(_: T.Type = T.self) -> T {
        var v: T = 0
        for i in 0..<(T.bitWidth / 8) { v |= T(truncatingIfNeeded: byte()) << (8 * i) }
        return v
    }

    /// The next `Double` from 8 raw bytes (every bit pattern: NaNs, infinities, subnormals).
    public mutating func double() -> Double { Double(bitPattern: integer(UInt64.self)) }

    /// A string of up to `max` bytes, decoded as UTF-8 with repair.
    public mutating func string(max: Int) -> String {
        let n = min(Int(byte()), max, bytes.count - position)
        guard n > 0 else { return "" }
        defer { position += n }
        return String(decoding: UnsafeRawBufferPointer(rebasing: bytes[position..<position + n]), as: UTF8.self)
    }
}

/// Seeds for a target's corpus: `Target --make-seeds DIR` writes valid inputs made by the
/// package's own writers (the files the unit tests make), then exits.
public enum FuzzSeeds {
    /// When the command line is `--make-seeds DIR`, calls `make(DIR)` and exits.
    public static func handle(_ make: (String) throws -> Void) {
        let args = CommandLine.arguments
        guard args.count == 3, args[1] == "--make-seeds" else { return }
        do { try make(args[2]) } catch {
            let line = "making seeds failed: \(error)\n"
            _ = line.withCString { Glibc.write(2, $0, strlen($0)) }
            exit(1)
        }
        exit(0)
    }

    /// Writes `bytes` to `dir/name`.
    public static func write(_ bytes: [UInt8], to dir: String, name: String) throws {
        let path = dir + "/" + name
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        guard fd >= 0 else { throw SeedError(message: "cannot create \(path)") }
        defer { close(fd) }
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + done, bytes.count - done) }
            guard n > 0 else { throw SeedError(message: "cannot write \(path)") }
            done += n
        }
    }

    /// Reads a whole file.
    public static func read(_ path: String) throws -> [UInt8] {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { throw SeedError(message: "cannot open \(path)") }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if n <= 0 { break }
            out += chunk[0..<n]
        }
        return out
    }

    public struct SeedError: Error, CustomStringConvertible {
        public let message: String
        public var description: String { message }
    }
}

/// A scratch file in memory (memfd) holding one input, for readers that take a path or a
/// descriptor. `path` is `/proc/self/fd/N`.
public final class MemoryFile {
    public let fd: Int32
    public var path: String { "/proc/self/fd/\(fd)" }

    public init(name: String) {
        fd = fuzz_memfd(name)
        precondition(fd >= 0, "memfd_create failed")
    }

    deinit { close(fd) }

    /// Replaces the contents with `bytes` and rewinds.
    public func set(_ bytes: UnsafeRawBufferPointer) {
        ftruncate(fd, 0)
        var done = 0
        while done < bytes.count {
            let n = pwrite(fd, bytes.baseAddress! + done, bytes.count - done, off_t(done))
            precondition(n > 0, "memfd write failed")
            done += n
        }
        lseek(fd, 0, SEEK_SET)
    }
}

/// The largest frame (bytes) a target allocates for an input; larger claims are skipped so that
/// a header asking for gigabytes tests the parser, not the machine's memory.
public let fuzzFrameByteLimit = 16 << 20
