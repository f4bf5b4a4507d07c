import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import Viewfinder
@testable import ViewfinderSinks

/// Two programs given one output (`viewfinder record --force out.mov` run twice): the second
/// leaves the first's file alone instead of truncating what it already wrote.
@Suite(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3"), "another program: python3"))
struct OutputLockTests {
    /// Another program holding `path` as our writers do (a POSIX write lock), until this object
    /// goes (it closes the program's standard input, and the program ends).
    final class Holder {
        let process = Process()
        let input = Pipe()
        init(_ path: String) throws {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = ["-c", "import fcntl, sys\nf = open(sys.argv[1], 'r+')\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint('locked', flush=True)\nsys.stdin.read()", path]
            let out = Pipe()
            process.standardOutput = out
            process.standardInput = input
            try process.run()
            let line = out.fileHandleForReading.availableData   // until the lock is held (or python ended)
            guard String(decoding: line, as: UTF8.self).hasPrefix("locked") else { throw SinkError.invalidArgument(name: "holder", reason: "python did not lock the file") }
        }
        var pid: Int32 { process.processIdentifier }
        deinit {
            try? input.fileHandleForWriting.close()
            if process.isRunning { process.waitUntilExit() }
        }
    }

    @Test func aFileAnotherProgramWritesIsLeftAsItIs() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/busy.vfraw"
        try Data("their frames".utf8).write(to: URL(fileURLWithPath: path))
        let holder = try Holder(path)
        let fmt = FrameFormat(.yuyv, width: 64, height: 32)
        // The dump and the movie asked to overwrite, and a stream file (a y4m, the metadata).
        #expect(throws: SinkError.fileInUse(path: path, pid: holder.pid)) { try RawDumpWriter(path: path, format: fmt, overwrite: true) }
        #expect(throws: SinkError.fileInUse(path: path, pid: holder.pid)) { try OutputFile(path: path, exclusive: false, regularFile: true) }
        #expect(throws: StreamFileError.cannotOpen(path: path, errno: EBUSY, message: "another program (pid \(holder.pid)) is writing it")) {
            try StreamFile.openForWriting(path)
        }
        #expect(throws: Y4MError.io(path: path, operation: "create", errno: EBUSY, message: "another program (pid \(holder.pid)) is writing it")) {
            try Y4MWriter(path: path, format: fmt)
        }
        // The checks before a run say so too, before any camera is opened.
        #expect(throws: SinkError.fileInUse(path: path, pid: holder.pid)) { try PatchedFile.checkWritable(path) }
        #expect(throws: StreamFileError.cannotOpen(path: path, errno: EBUSY, message: "another program (pid \(holder.pid)) is writing it")) {
            try StreamFile.checkWritable(path)
        }
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "their frames")
        #expect(SinkError.fileInUse(path: path, pid: holder.pid).description.contains("being written by another program (pid \(holder.pid))"))
    }

    @Test func aWriterOfThisProgramHoldsItsFileAgainstOthersAndReopensIt() throws {
        let dir = makeTempDirectory()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let path = dir + "/mine.vfraw"
        let fmt = FrameFormat(.yuyv, width: 64, height: 32)
        func heldByAnother() throws -> Bool {
            let probe = Process()
            probe.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            probe.arguments = ["-c", "import fcntl, sys\nf = open(sys.argv[1], 'r+')\ntry:\n    fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\nexcept OSError:\n    print('held')", path]
            let out = Pipe()
            probe.standardOutput = out
            try probe.run()
            probe.waitUntilExit()
            return String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) == "held\n"
        }
        var writer: RawDumpWriter? = try RawDumpWriter(path: path, format: fmt)
        // Another program cannot take it while this one writes it...
        #expect(try heldByAnother())
        // ...nor after this one reopened it to go on (a camera that came back): the reader that
        // reads its index first is closed before (closing it dropped the lock), and this
        // program's own reopen is not refused.
        try writer?.close()
        writer = nil
        #expect(try !heldByAnother())
        let appending = try RawDumpWriter(appendingTo: path, format: fmt)
        #expect(try heldByAnother())
        try appending.close()
    }
}
