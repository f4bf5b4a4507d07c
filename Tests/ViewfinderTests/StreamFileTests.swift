import Foundation
import Testing
@testable import Viewfinder

/// The rule per-frame metadata and other streams are opened by (`StreamFile`).
@Suite struct StreamFileTests {
    private func folder() -> String {
        let d = NSTemporaryDirectory() + "vf-streamfile-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try? FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
        return d
    }

    @Test func aFifoWithNoReaderIsAnErrorAtOnceNotAWaitForEver() throws {
        let d = folder()
        defer { try? FileManager.default.removeItem(atPath: d) }
        let fifo = d + "/lonely"
        #expect(mkfifo(fifo, 0o644) == 0)
        #expect(throws: StreamFileError.cannotOpen(path: fifo, errno: ENXIO, message: "a fifo with no reader (start the reader first)")) {
            _ = try StreamFile.openForWriting(fifo)
        }
        // With a reader the descriptor writes, blocking as usual.
        let reader = open(fifo, O_RDONLY | O_NONBLOCK)
        defer { close(reader) }
        let fd = try StreamFile.openForWriting(fifo)
        defer { close(fd) }
        #expect(fcntl(fd, F_GETFL) & O_NONBLOCK == 0)
        #expect(write(fd, "x\n", 2) == 2)
        var b = [UInt8](repeating: 0, count: 4)
        #expect(read(reader, &b, 4) == 2)
    }

    @Test func theCheckChangesNothingThereAndRefusesAFolder() throws {
        let d = folder()
        defer { try? FileManager.default.removeItem(atPath: d) }
        let file = d + "/kept.jsonl"
        try Data("earlier run\n".utf8).write(to: URL(fileURLWithPath: file))
        try StreamFile.checkWritable(file)
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "earlier run\n", "the check truncated the file")
        let fresh = d + "/new.jsonl"
        try StreamFile.checkWritable(fresh)
        #expect(!FileManager.default.fileExists(atPath: fresh), "the check left a file behind")
        #expect(throws: StreamFileError.self) { try StreamFile.checkWritable(d) }
        #expect(throws: StreamFileError.self) { try StreamFile.checkWritable(d + "/missing/m.jsonl") }
        #expect(throws: StreamFileError.self) { try StreamFile.checkWritable(file + "/m.jsonl") }   // a file as the folder
        // A link is checked where it leads: into a missing folder is refused (its own folder exists).
        let dangling = d + "/link.jsonl"
        #expect(symlink(d + "/missing/m.jsonl", dangling) == 0)
        #expect(throws: StreamFileError.self) { try StreamFile.checkWritable(dangling) }
        // A fifo nobody reads passes the check (it is not opened: that would end a reader's
        // stream); opening it then is the error above.
        let fifo = d + "/f"
        #expect(mkfifo(fifo, 0o644) == 0)
        try StreamFile.checkWritable(fifo)
        // Opening truncates in place, as a shell's `>`.
        let fd = try StreamFile.openForWriting(file)
        close(fd)
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "")
    }
}

/// Paths taken apart without NSString, whose path methods trap on a one-character name with this
/// toolchain (1 Dec sweep: `--metadata a`, `snap --output a`, `bench --report a` crashed).
@Suite struct PathNameTests {
    @Test func partsOfPathsAsNSStringGivesThemWithoutItsTrap() {
        let cases: [(path: String, folder: String, name: String, ext: String, stem: String)] = [
            ("a", ".", "a", "", "a"), ("a.jpg", ".", "a.jpg", "jpg", "a"), ("x/a", "x", "a", "", "x/a"),
            ("/a", "/", "a", "", "/a"), ("/", "/", "/", "", "/"), ("a/", ".", "a", "", "a"),
            ("dir//b.tar.gz", "dir", "b.tar.gz", "gz", "dir//b.tar"), (".profile", ".", ".profile", "", ".profile"),
            ("/tmp/x.y/z", "/tmp/x.y", "z", "", "/tmp/x.y/z"), ("-", ".", "-", "", "-"), ("./b.", ".", "b.", "", "./b."),
        ]
        for c in cases {
            #expect(PathName.folder(of: c.path) == c.folder, "\(c.path)")
            #expect(PathName.lastComponent(c.path) == c.name, "\(c.path)")
            #expect(PathName.pathExtension(c.path) == c.ext, "\(c.path)")
            #expect(PathName.deletingPathExtension(c.path) == c.stem, "\(c.path)")
        }
        #expect(PathName.appending("n", to: "d") == "d/n" && PathName.appending("n", to: "d/") == "d/n" && PathName.appending("n", to: "") == "n")
    }

    @Test func aOneCharacterNameIsCheckedLikeAnyOther() throws {
        // A bare name in the working folder (the package's, which may be written): checked,
        // nothing created, no trap.
        #expect(!FileManager.default.fileExists(atPath: "q"))
        try StreamFile.checkWritable("q")
        #expect(StreamFile.resolvingLink("q") == "q")
        #expect(!FileManager.default.fileExists(atPath: "q"))
    }
}
