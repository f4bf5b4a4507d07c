import Testing
import Foundation
import ArgumentParser
@testable import ViewfinderCommandLine
import ViewfinderKit
import ViewfinderBench

/// What an outside user's first session with the command line tried (29 Nov sweep): files from
/// `process`, an input given as the output, exports of damaged dumps, the README's own examples.
@Suite struct UserInputTests {
    /// A scratch folder of its own, removed afterwards.
    final class Scratch {
        let dir: String
        init() {
            dir = NSTemporaryDirectory() + "vf-cli-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
            try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        }
        deinit { try? FileManager.default.removeItem(atPath: dir) }
        func path(_ name: String) -> String { dir + "/" + name }
    }

    static func framesIn(y4m path: String) throws -> Int {
        let r = try Y4MReader(path: path)
        let f = Frame(capacity: r.format.maxByteCount, format: r.format)
        var n = 0
        while try r.read(into: f) { n += 1 }
        return n
    }

    static func size(_ path: String) -> Int {
        (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? -1
    }

    @Test func processWritesEveryFrameWithAndWithoutStages() throws {
        let s = Scratch()
        let input = s.path("in.y4m")
        #expect(CLIExit.run(["run", "--device", "pattern:width=96,height=64,frames=8", "--output", input]) == 0)
        #expect(try Self.framesIn(y4m: input) == 8)
        // No stages, a stage without delay, and one that holds frames (handed out at the end).
        for (i, stages) in [[], ["--stages", "null"], ["--stages", "stabilise:lookahead=3"]].enumerated() {
            let out = s.path("out\(i).y4m")
            #expect(CLIExit.run(["process", "--input", input, "--output", out, "--quiet"] + stages) == 0, "\(stages)")
            #expect(try Self.framesIn(y4m: out) == 8, "\(stages)")
        }
    }

    /// `process` says of its output's range what its input said (the stages do not change it):
    /// nothing when the input said nothing, LIMITED when it said LIMITED; the engine's own y4m
    /// says FULL.
    @Test func processPassesTheInputsColourRangeThrough() throws {
        let s = Scratch()
        let engine = s.path("engine.y4m")
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--output", engine]) == 0)
        #expect(try Y4MReader(path: engine).header.colorRange == "FULL")
        let frame = [UInt8](repeating: 128, count: 16 * 16 * 3 / 2)
        for tag in [nil, "LIMITED"] as [String?] {
            let input = s.path("in-\(tag ?? "none").y4m"), output = s.path("out-\(tag ?? "none").y4m")
            let header = "YUV4MPEG2 W16 H16 F30:1 C420jpeg" + (tag.map { " XCOLORRANGE=\($0)" } ?? "") + "\n"
            try Data(Array(header.utf8) + Array("FRAME\n".utf8) + frame).write(to: URL(fileURLWithPath: input))
            #expect(CLIExit.run(["process", "--input", input, "--output", output, "--quiet"]) == 0)
            #expect(try Y4MReader(path: output).header.colorRange == tag)
        }
        // The pixel aspect too (it was written 1:1 whatever the input said).
        let input = s.path("in-aspect.y4m"), output = s.path("out-aspect.y4m")
        try Data(Array("YUV4MPEG2 W16 H16 F30:1 A640:1279 C420jpeg\n".utf8) + Array("FRAME\n".utf8) + frame).write(to: URL(fileURLWithPath: input))
        #expect(CLIExit.run(["process", "--input", input, "--output", output, "--quiet"]) == 0)
        let aspect = try Y4MReader(path: output).header.aspect
        #expect(aspect.0 == 640 && aspect.1 == 1279, "A\(aspect.0):\(aspect.1)")
    }

    /// Options of a part that does not run, or that another option overrides, are refused, not
    /// ignored (2 Dec, third session, sweep: `--preset 640x480 --fps 15` ran at 1280x720, `bench
    /// --sweep-seconds` without `--sweep` and `--steps` with `--controls none` were accepted).
    @Test func optionsThatWouldBeIgnoredAreRefused() {
        for extra in [["--fps", "15"], ["--format", "nv12"], ["--width", "320"], ["--height", "480"]] {
            #expect(CLIExit.run(["run", "--device", "sim", "--preset", "640x480", "--frames", "1"] + extra) == 64, "\(extra)")
        }
        #expect(CLIExit.run(["bench", "--device", "pattern:width=64,height=32", "--sweep-seconds", "0.5"]) == 64)
        #expect(CLIExit.run(["bench", "--device", "pattern:width=64,height=32", "--controls", "none", "--steps", "5"]) == 64)
        #expect(CLIExit.run(["bench", "--device", "pattern:width=64,height=32", "--controls", "none,exposure"]) == 64)
    }

    /// The summary's `pipe` entry says what `--output` is: a regular file is no pipe.
    @Test func theOutputsSummarySaysWhatThePathIs() throws {
        let s = Scratch()
        let file = s.path("frames.y4m"), fifo = s.path("fifo")
        #expect(FileManager.default.createFile(atPath: file, contents: Data()))
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(FrameOutputs.kind(of: file) == "file")
        #expect(FrameOutputs.kind(of: fifo) == "fifo")
        #expect(FrameOutputs.kind(of: "/dev/null") == "device")
        #expect(FrameOutputs.kind(of: "-") == "stdout")
    }

    /// `run` and `process` keep an existing output or metadata file unless told (--force), as
    /// `record`, `dump`, `snap` and `export` do; a fifo or a device is written into either way.
    @Test func streamOutputsKeepAnExistingFileWithoutForce() throws {
        let s = Scratch()
        let taken = s.path("taken.y4m"), again = s.path("again.y4m")
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=4", "--output", taken]) == 0)
        let before = try Data(contentsOf: URL(fileURLWithPath: taken))
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--output", taken]) == 64)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--output", taken, "--output-format", "raw"]) == 64)
        #expect(try Data(contentsOf: URL(fileURLWithPath: taken)) == before)
        #expect(CLIExit.run(["process", "--input", taken, "--output", again, "--quiet"]) == 0)
        let processed = try Data(contentsOf: URL(fileURLWithPath: again))
        #expect(CLIExit.run(["process", "--input", taken, "--output", again, "--stages", "null", "--quiet"]) == 64)
        #expect(try Data(contentsOf: URL(fileURLWithPath: again)) == processed)
        // Told to: replaced.
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--output", taken, "--force"]) == 0)
        #expect(try Self.framesIn(y4m: taken) == 2)
        #expect(CLIExit.run(["process", "--input", taken, "--output", again, "--force", "--quiet"]) == 0)
        #expect(try Self.framesIn(y4m: again) == 2)
        // A device and a fifo are written into without it, and so is a descriptor the shell
        // opened (`--output /dev/stdout > out.y4m` names a file the shell has just created).
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--output", "/dev/null"]) == 0)
        let shells = open(s.path("shell.y4m"), O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--output", "/dev/fd/\(shells)"]) == 0)
        close(shells)
        #expect(try Self.framesIn(y4m: s.path("shell.y4m")) == 2)
        let fifo = s.path("f.fifo")
        #expect(mkfifo(fifo, 0o600) == 0)
        let got = LockedBox(0)
        let reader = Thread {
            // Opening waits for the writer; reading ends at its close.
            guard let h = FileHandle(forReadingAtPath: fifo) else { return }
            let n = h.readDataToEndOfFile().count
            got.withLock { $0 = n }
        }
        reader.start()
        #expect(CLIExit.run(["process", "--input", taken, "--output", fifo, "--quiet"]) == 0)
        for _ in 0..<200 where got.withLock({ $0 }) == 0 { usleep(10_000) }
        #expect(got.withLock { $0 } == (try Data(contentsOf: URL(fileURLWithPath: again))).count)
        // The metadata file too.
        let meta = s.path("m.jsonl")
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=4", "--metadata", meta]) == 0)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--metadata", meta]) == 64)
        #expect(CLIExit.run(["process", "--input", taken, "--output", "/dev/null", "--metadata", meta]) == 64)
        #expect(try String(contentsOfFile: meta, encoding: .utf8).split(separator: "\n").count == 4)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--metadata", meta, "--force"]) == 0)
        #expect(try String(contentsOfFile: meta, encoding: .utf8).split(separator: "\n").count == 2)
        // --force is for the files.
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--force"]) == 64)
    }

    @Test func anInputIsNeverTheOutput() throws {
        let s = Scratch()
        let y4m = s.path("a.y4m"), dump = s.path("a.vfdump")
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=4", "--output", y4m]) == 0)
        #expect(CLIExit.run(["dump", "--device", "pattern:width=64,height=32,frames=4", "--output", dump]) == 0)
        let (y4mSize, dumpSize) = (Self.size(y4m), Self.size(dump))
        #expect(y4mSize > 0 && dumpSize > 0)
        // Also through another spelling of the path.
        let other = s.dir + "/./a.vfdump"
        #expect(CLIExit.run(["run", "--device", "dump:" + dump, "--output", other]) == 64)
        #expect(CLIExit.run(["run", "--device", "dump:" + dump, "--metadata", dump]) == 64)
        #expect(CLIExit.run(["dump", "--device", "dump:" + dump, "--output", dump, "--force"]) == 64)
        #expect(CLIExit.run(["record", "--device", "dump:" + dump, "--output", dump, "--force"]) == 64)
        #expect(CLIExit.run(["export", dump, other, "--force"]) == 64)
        #expect(CLIExit.run(["export", y4m, y4m, "--force"]) == 64)
        #expect(CLIExit.run(["process", "--input", y4m, "--output", y4m]) == 64)
        // Without --force too, the error is that it is the input (not "add --force").
        do {
            let e = try ExportCommand.parse([y4m, y4m])
            try e.run()
            Issue.record("imported a y4m onto itself")
        } catch {
            #expect("\(error)".contains("is the input"), "\(error)")
        }
        #expect(Self.size(y4m) == y4mSize && Self.size(dump) == dumpSize)
        #expect(try Self.framesIn(y4m: y4m) == 4)
        #expect(try RawDumpReader(path: dump).frameCount == 4)
    }

    /// From the sweeps (3 Dec): values the parser or a later step misread are usage errors that
    /// say what is wrong, before the camera opens.
    @Test func misreadValuesAreUsageErrors() {
        let s = Scratch()
        let device = "pattern:width=64,height=32,frames=3"
        // A stage that steers the camera's controls, twice: two loops fought over the lens.
        for stages in ["focus,focus", "exposure,null,exposure", "white_balance,white_balance:mode=continuous"] {
            #expect(CLIExit.run(["run", "--device", device, "--stages", stages]) == 64, "--stages '\(stages)'")
        }
        #expect(CLIExit.run(["run", "--device", device, "--stages", "null,null,exposure,focus"]) == 0)
        #expect(throws: ConfigurationError.repeatedStage("focus")) { try StageRegistry.builtIn.checkRepeats(try StageSpec.parseList("focus,focus")) }
        // A negative size was "Missing value" (taken for an option); sizes past UInt64 trapped.
        #expect(CLIExit.run(["dump", "--device", device, "--buffer-memory", "-1", "--output", s.path("a.vfdump")]) == 64)
        #expect(CLIExit.run(["dump", "--device", device, "--buffer-memory", "1e400G", "--output", s.path("a.vfdump")]) == 64)
        #expect(CLIExit.run(["record", "--device", device, "--max-size", "1e30G", "--output", s.path("a.mov")]) == 64)
        // A movie limit smaller than a movie's header ended every recording before a picture.
        #expect(CLIExit.run(["record", "--device", device, "--max-size", "1", "--output", s.path("a.mov")]) == 64)
        #expect(!FileManager.default.fileExists(atPath: s.path("a.mov")))
        // A still from a camera that streams JPEGs passes its JPEG through: --quality and
        // --subsampling would be ignored (they were, without a word); with a stage, or --raw, not.
        let mjpeg = "sim:width=160,height=120,format=mjpeg"
        #expect(CLIExit.run(["snap", "--device", mjpeg, "--quality", "10", "--output", s.path("q.jpg")]) == 64)
        #expect(CLIExit.run(["snap", "--device", mjpeg, "--subsampling", "grey", "--output", s.path("q.jpg")]) == 64)
        #expect(!FileManager.default.fileExists(atPath: s.path("q.jpg")))
        #expect(CLIExit.run(["snap", "--device", mjpeg, "--warmup", "1", "--output", s.path("q.jpg")]) == 0)
        #expect(CLIExit.run(["snap", "--device", "sim:width=160,height=120", "--quality", "10", "--warmup", "1", "--output", s.path("q2.jpg")]) == 0)
        // An unknown command with --help is the unknown command, not the top-level help and 0.
        #expect(CLIExit.run(["info", "--help"]) == 64)
        #expect(CLIExit.run(["info"]) == 64)
    }

    /// Empty items in a list and an empty output path are usage errors before the camera opens
    /// (they were taken as "no stage there", "no bracket", or failed after capturing).
    @Test func emptyListItemsAndPathsAreUsageErrors() {
        let s = Scratch()
        let device = "pattern:width=64,height=32,frames=3"
        for stages in ["", ",", "exposure,,focus", "exposure,"] {
            #expect(CLIExit.run(["run", "--device", device, "--stages", stages]) == 64, "--stages '\(stages)'")
        }
        #expect(CLIExit.run(["run", "--device", device, "--stages", "exposure,null"]) == 0)
        for bracket in ["", ",", "1,,2", "1,"] {
            #expect(CLIExit.run(["snap", "--device", device, "--output", s.path("b.jpg"), "--bracket", bracket]) == 64, "--bracket '\(bracket)'")
        }
        #expect(CLIExit.run(["record", "--device", device, "--output", ""]) == 64)
        #expect(CLIExit.run(["dump", "--device", device, "--output", ""]) == 64)
        #expect(CLIExit.run(["snap", "--device", device, "--output", ""]) == 64)
        #expect(CLIExit.run(["run", "--device", device, "--output", ""]) == 64)
        #expect(CLIExit.run(["run", "--device", device, "--metadata", ""]) == 64)
    }

    @Test func aDumpExportsOnlyToY4MOrAMovie() {
        let s = Scratch()
        let dump = s.path("a.vfdump")
        #expect(CLIExit.run(["dump", "--device", "pattern:width=64,height=32,frames=3", "--output", dump]) == 0)
        #expect(CLIExit.run(["export", dump, s.path("b.vfdump")]) == 64)
        #expect(CLIExit.run(["export", dump, s.path("b.bin")]) == 64)
        #expect(!FileManager.default.fileExists(atPath: s.path("b.vfdump")))
        #expect(CLIExit.run(["export", dump, s.path("b.y4m")]) == 0)
        #expect(CLIExit.run(["export", dump, s.path("b.mov")]) == 0)
        // A y4m imports into a dump only: a dump under a .mov or .y4m name, or in a file called
        // '-', is what it wrote before.
        for out in [s.path("c.mov"), s.path("c.y4m"), "-"] {
            #expect(CLIExit.run(["export", s.path("b.y4m"), out]) == 64, "\(out)")
            #expect(!FileManager.default.fileExists(atPath: out))
        }
        #expect(CLIExit.run(["export", s.path("b.y4m"), s.path("c.vfdump")]) == 0)
    }

    /// A frame whose record fails its checksum is left out and counted; the frames after it are
    /// exported (replay does the same), and a dump with no readable frame is an error.
    @Test func exportSkipsACorruptFrameAndKeepsTheRest() throws {
        let s = Scratch()
        let dump = s.path("a.vfdump")
        #expect(CLIExit.run(["dump", "--device", "pattern:width=64,height=32,frames=6", "--output", dump, "--compression", "none"]) == 0)
        let entries = try RawDumpReader(path: dump).entries
        #expect(entries.count == 6)
        // Flip bytes in the middle of frame 2's payload.
        let h = try #require(FileHandle(forUpdatingAtPath: dump))
        let at = entries[2].offset + UInt64(entries[2].storedLength) / 2 + 64
        try h.seek(toOffset: at)
        let old = try #require(try h.read(upToCount: 16))
        try h.seek(toOffset: at)
        try h.write(contentsOf: Data(old.map { $0 ^ 0x5A }))
        try h.close()
        let r = try DumpConversion.exportY4M(dump: dump, to: s.path("out.y4m"))
        #expect(r.frames == 5 && r.skippedFrames == 1)
        #expect(r.firstSkipReason?.contains("frame 2") == true)
        #expect(try Self.framesIn(y4m: s.path("out.y4m")) == 5)
        let m = try DumpConversion.exportMovie(dump: dump, to: s.path("out.mov"))
        #expect(m.frames == 5 && m.skippedFrames == 1)
        #expect(CLIExit.run(["export", dump, s.path("cli.y4m")]) == 0)
    }

    @Test func theREADMEsBracketParses() throws {
        let c = try ViewfinderCommand.parseAsRoot(["snap", "--device", "sim", "--bracket", "-2,0,2"])
        let snap = try #require(c as? SnapCommand)
        #expect(snap.bracket == "-2,0,2")
    }

    @Test func stageListMistakesSayWhatToWrite() {
        #expect(throws: ConfigurationError.self) { _ = try StageSpec.parseList("stabilise:lookahead=5,keep=0.9") }
        do {
            _ = try StageSpec.parseList("stabilise:lookahead=5,keep=0.9")
        } catch {
            #expect("\(error)".contains("stabilise:keep=0.9"))
            #expect(CLIExit.status(for: error) == 64)
        }
        #expect(throws: ConfigurationError.invalidOption(stage: "stabilise", option: "lookahead", reason: "given twice")) {
            _ = try StageSpec.parseList("stabilise:lookahead=5:lookahead=60")
        }
        do {
            _ = try StageSpec.parseList(":")
            Issue.record("an empty stage name parsed")
        } catch {
            #expect("\(error)".contains("has no name"))
        }
        // What works stays as it was.
        #expect((try? StageSpec.parseList("exposure:mode=continuous,focus,stabilise:lookahead=15").count) == 3)
    }
}

extension UserInputTests {
    @Test func photoSettingsOutOfRangeAreUsageErrors() {
        #expect(CLIExit.status(for: PhotoCaptureError.invalidSettings("bias -20.0 EV is outside -8...8")) == 64)
        #expect(CLIExit.status(for: PhotoCaptureError.timedOut) == 1)
    }

    @Test func aTakenPortIsSaidInWords() {
        struct NIOLike: Error, CustomStringConvertible {
            var description: String { "bind(descriptor:ptr:bytes:): Address already in use) (errno: 98)" }
        }
        struct Other: Error, CustomStringConvertible { var description: String { "something else" } }
        #expect(PreviewCommand.serverFailure(NIOLike(), host: "127.0.0.1", port: 8080)
                == "preview server: cannot listen on 127.0.0.1:8080: \(String(cString: strerror(98))) (errno 98)")
        #expect(PreviewCommand.serverFailure(Other(), host: "::1", port: 1) == "preview server: something else")
    }

    /// An atomic write into a folder that does not exist names the user's file, not the
    /// temporary one beside it.
    @Test func aFailedStillNamesTheUsersFile() {
        let path = "/nonexistent-\(getpid())/still.jpg"
        do {
            try AtomicFile.write([1, 2, 3], to: path)
            Issue.record("wrote into a folder that does not exist")
        } catch {
            #expect("\(error)".contains("'\(path)'"), "\(error)")
            #expect(!"\(error)".contains(".tmp"), "\(error)")
        }
    }
}

extension UserInputTests {
    /// The commands no other test ran to success: a burst and a bracket of stills, the controls,
    /// the device and stage lists.
    @Test func stillsControlsAndListsSucceed() throws {
        let s = Scratch()
        let burst = s.path("b.jpg"), bracket = s.path("k.jpg")
        #expect(CLIExit.run(["snap", "--device", "sim:width=160,height=120", "--output", burst, "--burst", "2"]) == 0)
        #expect(CLIExit.run(["snap", "--device", "sim:width=160,height=120", "--output", bracket, "--bracket", "-1,1"]) == 0)
        for name in ["b-1.jpg", "b-2.jpg", "k-1.jpg", "k-2.jpg"] {
            let data = try Data(contentsOf: URL(fileURLWithPath: s.path(name)))
            #expect(data.count > 200 && data.prefix(2) == Data([0xFF, 0xD8]), "\(name)")
        }
        #expect(CLIExit.run(["controls", "--device", "sim", "--set", "gain=200"]) == 0)
        #expect(CLIExit.run(["controls", "--device", "sim", "--set", "gain=99999"]) == 64)   // a value out of its range: usage
        #expect(CLIExit.run(["devices", "--json"]) == 0)
        #expect(CLIExit.run(["stages"]) == 0)
    }
}

extension UserInputTests {
    @Test func aControlValueOffItsStepSaysSo() {
        let m = CLIExit.message(for: DeviceError.controlOutOfRange(device: "sim", control: "white_balance_temperature", value: 3005, range: 2800...6500))
        #expect(m.contains("within 2800.0...6500.0 but not one of its values"))
        let o = CLIExit.message(for: DeviceError.controlOutOfRange(device: "sim", control: "gain", value: 50, range: 100...1600))
        #expect(o.contains("is outside 100.0...1600.0"))
    }

    @Test func malformedRequestsExit64() {
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--audio", "null", "--audio-format", "rate=0"]) == 64)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--shm", ".."]) == 64)
        // A size or rate no mode can have is a usage error, "-5" included (read as the value).
        for args in [["--width", "-5"], ["--width", "0"], ["--height", "100000"], ["--fps", "0"], ["--fps", "nan"], ["--fps", "-30"], ["--fps", "inf"]] {
            #expect(CLIExit.run(["run", "--device", "sim:paced=false", "--frames", "2"] + args) == 64, "\(args)")
            #expect(CLIExit.run(["bench", "--device", "sim:paced=false", "--duration", "1"] + args) == 64, "\(args)")
        }
        #expect(CLIExit.run(["run", "--device", "sim:paced=false", "--frames", "2", "--width", "160", "--height", "120", "--fps", "30"]) == 0)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--shm", String(repeating: "a", count: 201)]) == 64)
    }

    /// A JSON mistake in the words of the JSON: the key path as written, what belongs there.
    @Test func jsonMistakesAreSaidInTheFilesWords() throws {
        let s = Scratch()
        let file = s.path("p.json")
        try Data(#"{"device": "sim", "stages": [{"name": "exposure", "enabled": "yes"}]}"#.utf8).write(to: URL(fileURLWithPath: file))
        do {
            _ = try PipelineConfiguration.load(path: file)
            Issue.record("a string for enabled was accepted")
        } catch {
            #expect("\(error)".contains("'stages[0].enabled' must be true or false"), "\(error)")
        }
        // A key given twice, at the top or inside (the decoder kept one of the two silently), and
        // a number no Double holds ("'stages' must be an object" blamed the wrong thing): 3 Dec.
        for (json, said) in [(#"{"device": "sim", "device": "pattern", "stages": []}"#, "'device' is given twice"),
                             (#"{"stages": [{"name": "exposure", "options": {"target": 0.4, "target": 0.6}}]}"#, "'stages[0].options.target' is given twice"),
                             (#"{"stages": [{"name": "exposure", "options": {"\u0074arget": 0.4, "target": 0.6}}]}"#, "'stages[0].options.target' is given twice"),
                             (#"{"stages": [{"name": "exposure", "options": {"target": 1e309}}]}"#, "'stages[0].options.target' is a number out of range")] {
            let f = s.path("twice.json")
            try Data(json.utf8).write(to: URL(fileURLWithPath: f))
            do {
                _ = try PipelineConfiguration.load(path: f)
                Issue.record("accepted: \(json)")
            } catch {
                #expect("\(error)".contains(said), "\(error)")
            }
        }
        // The same key in two objects is no duplicate.
        let two = s.path("two.json")
        try Data(#"{"stages": [{"name": "exposure", "options": {"target": 0.4}}, {"name": "focus", "options": {"target": 1}}]}"#.utf8).write(to: URL(fileURLWithPath: two))
        #expect(try PipelineConfiguration.load(path: two).stages.count == 2)
        let empty = s.path("empty.json")
        try Data("{}".utf8).write(to: URL(fileURLWithPath: empty))
        do {
            _ = try BenchReport.load(path: empty)
            Issue.record("an empty baseline was accepted")
        } catch {
            #expect("\(error)".contains("'schema_version' is missing"), "\(error)")
        }
        do {
            _ = try BenchReport.load(path: s.dir)
            Issue.record("a folder was read as a baseline")
        } catch {
            #expect("\(error)".contains("it is a folder"), "\(error)")
        }
    }

    /// From the README sweep (29 Nov, second session).
    @Test func aRingAnotherRunningWriterHoldsIsRefusedBeforeCapturing() throws {
        let name = "vf-cli-busy-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        let held = try ShmRingWriter(name: name, format: FrameFormat(.yuyv, width: 64, height: 32), interval: FrameInterval(numerator: 1, denominator: 30))
        defer { held.close(unlink: true) }
        let t0 = monotonicNanoseconds()
        // Paced for 10 s: it used to capture all of it, publish nothing and fail at the end.
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,fps=30,paced=true", "--duration", "10", "--shm", name]) == 1)
        #expect(monotonicNanoseconds() - t0 < 8_000_000_000, "refused after \(Double(monotonicNanoseconds() - t0) / 1e9) s")
        #expect(throws: ShmRingError.inUse(name: name, pid: getpid())) { try ShmRingWriter.checkAvailable(name: name) }
        #expect(throws: Never.self) { try ShmRingWriter.checkAvailable(name: name + "-free") }
    }

    @Test func aControlValueOutOfRangeOrAnUnknownControlIsAUsageError() {
        #expect(CLIExit.run(["controls", "--device", "sim", "--set", "gain=99999"]) == 64)
        #expect(CLIExit.run(["controls", "--device", "sim", "--set", "nosuch=1"]) == 64)
        #expect(CLIExit.run(["controls", "--device", "sim", "--set", "gain=abc"]) == 64)
    }

    @Test func anUnknownDeviceNamesEveryKind() {
        do {
            _ = try DeviceDirectory.standard.open("nosuchdev")
            Issue.record("'nosuchdev' opened")
        } catch {
            let m = CLIExit.message(for: error)
            #expect(m.contains("pattern[:options]") && m.contains("sim[:options]") && m.contains("dump:FILE") && m.contains("/dev/videoN"), "\(m)")
        }
    }

    @Test func aFileThatIsNotJSONIsSaidOnce() throws {
        let s = Scratch()
        let file = s.path("bad.json")
        try Data("{ not json".utf8).write(to: URL(fileURLWithPath: file))
        let error = #expect(throws: ConfigurationError.self) { _ = try PipelineConfiguration.load(path: file) }
        let m = error.map { "\($0)" } ?? ""
        #expect(m.contains("not valid JSON") && m.components(separatedBy: "not valid JSON").count == 2, "\(m)")
    }

    /// From the bad-input sweep (29 Nov, second session).
    @Test func aDurationBeyondAnyRunIsAUsageErrorNotACrash() {
        // `inf` and 2e10 s trapped converting the deadline to nanoseconds (SIGILL).
        for d in ["inf", "2e10", "nan"] {
            #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--duration", d]) == 64, "\(d)")
            #expect(CLIExit.run(["dump", "--device", "pattern:width=64,height=32,frames=2", "--duration", d, "--output", "/tmp/vf-never-\(getpid()).vfdump"]) == 64, "\(d)")
        }
        #expect(CLIExit.run(["bench", "--device", "pattern:width=64,height=32", "--duration", "1e300"]) == 64)
        #expect(CLIExit.run(["bench", "--device", "pattern:width=64,height=32", "--sweep", "--sweep-seconds", "inf"]) == 64)
        // The largest allowed runs (it ends at its 2 frames).
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=2", "--duration", "9000000"]) == 0)
    }

    @Test func aFifoAsTheSimsSceneIsRefusedNotWaitedOnForEver() throws {
        let s = Scratch()
        let fifo = s.path("scene.jpg")
        #expect(mkfifo(fifo, 0o644) == 0)
        #expect(CLIExit.run(["run", "--device", "sim:paced=false,width=64,height=48,scene=\(fifo)", "--frames", "2"]) == 64)   // a bad device option: usage
        #expect(CLIExit.run(["run", "--device", "sim:paced=false,width=64,height=48,scene=\(s.dir)", "--frames", "2"]) == 64)   // a bad device option: usage
    }

    @Test func outputsWriteThroughSymbolicLinksAndIntoDevicesInsteadOfReplacingThem() throws {
        let s = Scratch()
        let target = s.path("target.jsonl"), link = s.path("link.jsonl")
        #expect(symlink(target, link) == 0)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--metadata", link]) == 0)
        var st = stat()
        #expect(lstat(link, &st) == 0 && st.st_mode & S_IFMT == S_IFLNK, "the link was replaced by a file")
        #expect(try String(contentsOfFile: target, encoding: .utf8).split(separator: "\n").count == 3)
        // A still through a link: the link stays, its target is the JPEG.
        let still = s.path("still.jpg"), stillLink = s.path("still-link.jpg")
        #expect(symlink(still, stillLink) == 0)
        #expect(CLIExit.run(["snap", "--device", "sim:width=160,height=120", "--output", stillLink]) == 0)
        #expect(lstat(stillLink, &st) == 0 && st.st_mode & S_IFMT == S_IFLNK)
        #expect(try Data(contentsOf: URL(fileURLWithPath: still)).prefix(2) == Data([0xFF, 0xD8]))
        // A still into a device is written into it without --force, as run and process do (3 Dec:
        // "'/dev/null' exists; add --force"); the device stays a device.
        #expect(CLIExit.run(["snap", "--device", "sim:width=160,height=120", "--output", "/dev/null"]) == 0)
        #expect(stat("/dev/null", &st) == 0 && st.st_mode & S_IFMT == S_IFCHR)
        // A still into a fifo nobody reads: an error at once, not a wait for a reader for ever.
        let noReader = s.path("still.fifo")
        #expect(mkfifo(noReader, 0o644) == 0)
        let t0 = Date()
        #expect(CLIExit.run(["snap", "--device", "sim:width=160,height=120", "--output", noReader]) == 1)
        #expect(Date().timeIntervalSince(t0) < 20)
        // A dump exported into a device: written into without --force, as a still is.
        let dump = s.path("d.vfdump")
        #expect(CLIExit.run(["dump", "--device", "pattern:width=64,height=32,frames=3", "--output", dump]) == 0)
        let y4mFifo = s.path("export-fifo.y4m")
        #expect(mkfifo(y4mFifo, 0o644) == 0)
        let y4mReader = open(y4mFifo, O_RDWR | O_NONBLOCK)
        #expect(y4mReader >= 0)
        defer { close(y4mReader) }
        #expect(CLIExit.run(["export", dump, y4mFifo]) == 0)
        var head = [UInt8](repeating: 0, count: 9)
        #expect(read(y4mReader, &head, 9) == 9 && String(decoding: head, as: UTF8.self) == "YUV4MPEG2")
        #expect(lstat(y4mFifo, &st) == 0 && st.st_mode & S_IFMT == S_IFIFO)
        // A fifo with a reader: the lines go to the reader and the fifo stays a fifo. (The reader
        // holds it open read-write, so it never waits for the writer nor sees an end.)
        let fifo = s.path("meta.fifo")
        #expect(mkfifo(fifo, 0o644) == 0)
        let reader = open(fifo, O_RDWR | O_NONBLOCK)
        #expect(reader >= 0)
        defer { close(reader) }
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--metadata", fifo]) == 0)
        var buf = [UInt8](repeating: 0, count: 65536)
        let n = read(reader, &buf, buf.count)
        #expect(String(decoding: buf[0..<max(n, 0)], as: UTF8.self).split(separator: "\n").count == 3)
        #expect(lstat(fifo, &st) == 0 && st.st_mode & S_IFMT == S_IFIFO)
        // A fifo nobody reads: an error, not a run that waits for a reader for ever.
        let lonely = s.path("nobody.fifo")
        #expect(mkfifo(lonely, 0o644) == 0)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--metadata", lonely]) == 1)
        // A folder is no metadata file: refused before the run.
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--metadata", s.dir]) == 1)
        // `process --metadata` opens by the same rule: the lonely fifo is an error, the folder too.
        let input = s.path("in.y4m")
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--output", input]) == 0)
        #expect(CLIExit.run(["process", "--input", input, "--output", s.path("out.y4m"), "--metadata", lonely]) == 1)
        #expect(access(s.path("out.y4m"), F_OK) != 0, "the output was created before the metadata file was found bad")
        #expect(CLIExit.run(["process", "--input", input, "--output", s.path("out.y4m"), "--metadata", s.dir]) == 1)
        #expect(lstat(lonely, &st) == 0 && st.st_mode & S_IFMT == S_IFIFO)
        // An output that cannot be created leaves an earlier metadata file as it was.
        let kept = s.path("kept.jsonl")
        #expect(FileManager.default.createFile(atPath: kept, contents: Data("earlier\n".utf8)))
        #expect(CLIExit.run(["process", "--input", input, "--output", "/nonexistent-\(getpid())/out.y4m", "--metadata", kept, "--force"]) == 1)
        #expect(try String(contentsOfFile: kept, encoding: .utf8) == "earlier\n")
    }

    @Test func aFailedFrameOutputFailsTheRun() {
        // /dev/full: every write fails with ENOSPC, as on a full disk (it exited 0).
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=5", "--output", "/dev/full"]) == 1)
    }

    @Test func aBadQualityIsRefusedBeforeAnExistingMovieIsTouched() throws {
        let s = Scratch()
        let dump = s.path("a.vfdump"), movie = s.path("good.mov")
        #expect(CLIExit.run(["dump", "--device", "pattern:width=64,height=32,frames=4", "--output", dump]) == 0)
        #expect(CLIExit.run(["export", dump, movie]) == 0)
        let before = try Data(contentsOf: URL(fileURLWithPath: movie))
        #expect(CLIExit.run(["export", dump, movie, "--force", "--quality", "0"]) == 64)
        #expect(try Data(contentsOf: URL(fileURLWithPath: movie)) == before)
    }

    @Test func nothingToExportOrToSetIsAnError() throws {
        let s = Scratch()
        let y4m = s.path("header.y4m"), dump = s.path("h.vfdump")
        try Data("YUV4MPEG2 W16 H16 F30:1 C420jpeg\n".utf8).write(to: URL(fileURLWithPath: y4m))
        #expect(CLIExit.run(["export", y4m, dump]) == 1)
        #expect(!FileManager.default.fileExists(atPath: dump))
        #expect(CLIExit.run(["controls", "--device", "pattern", "--set", "gain=200"]) == 64)
        #expect(CLIExit.run(["controls", "--device", "pattern"]) == 0)
    }

    @Test func aReportThatCannotBeWrittenIsFoundBeforeTheRun() {
        #expect(throws: BenchError.self) { try BenchCommand.checkWritable("/nonexistent-\(getpid())/r.html") }
        #expect(throws: BenchError.self) { try BenchCommand.checkWritable(NSTemporaryDirectory()) }
        #expect(throws: Never.self) { try BenchCommand.checkWritable(NSTemporaryDirectory() + "r.html") }
        // A device is written into (its own permission counts), and a link is checked where it
        // leads: one into a missing folder is refused before the run, not after it.
        #expect(throws: Never.self) { try BenchCommand.checkWritable("/dev/null") }
        let dangling = NSTemporaryDirectory() + "vf-report-link-\(getpid())"
        unlink(dangling)
        #expect(symlink("/nonexistent-\(getpid())/r.html", dangling) == 0)
        defer { unlink(dangling) }
        #expect(throws: BenchError.self) { try BenchCommand.checkWritable(dangling) }
    }

    @Test func aQuantileIsNeverAboveTheLargestSample() {
        let h = LatencyHistogram()
        for ns in [17_000, 18_000, 24_600] as [UInt64] { h.record(nanoseconds: ns) }
        #expect(h.quantile(0.99) == 24_600)
        #expect(h.quantile(0.5) <= 24_600)
    }

    @Test(.enabled(if: geteuid() == 0, "mknod needs root (CI runs as root)"))
    func moviesAndDumpsRefuseADeviceNodeAndNeverRemoveIt() throws {
        let s = Scratch()
        for (name, minor) in [("null", 3), ("full", 7)] {
            let node = s.path("my" + name)
            #expect(mknod(node, S_IFCHR | 0o666, dev_t(1 << 8 | minor)) == 0)
            for args in [["record", "--device", "sim:width=64,height=64,paced=false,frames=5", "-o", node, "--force"],
                         ["dump", "--device", "sim:width=64,height=64,paced=false,frames=5", "-o", node, "--force"]] {
                // A movie and a dump are patched in place: a device is refused (it was written
                // into, failed, and then unlinked — /dev/full itself went that way).
                #expect(CLIExit.run(args) == 1, "\(args)")
                var st = stat()
                #expect(lstat(node, &st) == 0 && st.st_mode & S_IFMT == S_IFCHR, "\(args[0]) removed or replaced the device node")
            }
        }
    }

    @Test(.enabled(if: geteuid() == 0, "mounting a small tmpfs needs root (CI runs as root)"))
    func aDumpStopsWhenItsDiskIsFullInsteadOfCapturingOnForNothing() throws {
        let s = Scratch()
        let disk = try Self.mountSmallDisk(s.path("small"), size: "2m")
        defer { Self.unmount(disk) }
        let t0 = monotonicNanoseconds()
        #expect(CLIExit.run(["dump", "--device", "sim:width=640,height=480,paced=false,noise=5", "--duration", "30", "--compression", "none", "-o", disk + "/f.vfdump"]) == 1)
        let seconds = Double(monotonicNanoseconds() - t0) / 1e9
        #expect(seconds < 15, "the dump ran on for \(seconds) s after its disk was full")
        // What was written before the disk filled stays readable.
        #expect(try RawDumpReader(path: disk + "/f.vfdump").frameCount > 0)
    }

    /// From the bad-input sweep of 1 Dec: a command never writes over what it reads or writes
    /// twice into one file, and a movie's or dump's file is checked before the camera opens.
    @Test func snapNeverWritesOverItsInputAndTwoOutputsAreNeverOneFile() throws {
        let s = Scratch()
        let dump = s.path("s.vfdump")
        #expect(CLIExit.run(["dump", "--device", "pattern:width=64,height=32,frames=4", "--output", dump]) == 0)
        let size = Self.size(dump)
        let link = s.path("link.vfdump")
        #expect(symlink(dump, link) == 0)
        for out in [dump, link, s.dir + "/./s.vfdump"] {
            #expect(CLIExit.run(["snap", "--device", "dump:" + dump, "--output", out, "--force"]) == 64, "\(out)")
        }
        // A burst's numbered names, and a raw companion's.
        let numbered = s.path("b-1.vfdump")
        #expect(CLIExit.run(["dump", "--device", "pattern:width=64,height=32,frames=4", "--output", numbered]) == 0)
        #expect(CLIExit.run(["snap", "--device", "dump:" + numbered, "--burst", "2", "--output", s.path("b.vfdump"), "--force"]) == 64)
        #expect(Self.size(dump) == size && Self.size(numbered) > 0)
        #expect(try RawDumpReader(path: dump).frameCount == 4)
        // --output and --metadata as one file: refused, before capturing.
        let y4m = s.path("x.y4m")
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--output", y4m, "--metadata", y4m]) == 64)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--output", y4m, "--metadata", s.dir + "//x.y4m"]) == 64)
        #expect(!FileManager.default.fileExists(atPath: y4m))
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--output", y4m]) == 0)
        #expect(CLIExit.run(["process", "--input", y4m, "--output", s.path("o.y4m"), "--metadata", s.path("o.y4m")]) == 64)
        // /dev/null may take both.
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--output", "/dev/null", "--metadata", "/dev/null"]) == 0)
        // A movie or a dump into a folder, or a missing one: said before the camera opens, with
        // or without --force (it said "exists; add --force", and --force then captured first).
        for cmd in ["record", "dump"] {
            #expect(CLIExit.run([cmd, "--device", "pattern:width=64,height=32,frames=3", "--output", s.dir]) == 1, "\(cmd)")
            #expect(CLIExit.run([cmd, "--device", "pattern:width=64,height=32,frames=3", "--output", s.dir, "--force"]) == 1, "\(cmd)")
            #expect(CLIExit.run([cmd, "--device", "pattern:width=64,height=32,frames=3", "--output", s.path("missing/f")]) == 1, "\(cmd)")
        }
        #expect(throws: SinkError.self) { try PatchedFile.checkWritable(s.dir) }
        #expect(throws: SinkError.self) { try PatchedFile.checkWritable("/dev/null") }
        #expect(throws: Never.self) { try PatchedFile.checkWritable(s.path("new.mov")) }
        #expect(absolutePath("/a/./b//c/../d") == "/a/b/d")
    }

    /// A Bayer camera's frames are recorded and photographed from the engine's decoded view
    /// (1 Dec sweep: `record` wrote no frame and exited 0, `snap` failed).
    @Test func bayerStreamsAreRecordedAndPhotographed() throws {
        let s = Scratch()
        for f in ["sbggr8", "sgbrg8", "sgrbg8", "srggb8"] {
            let movie = s.path("\(f).mov")
            #expect(CLIExit.run(["record", "--device", "pattern:format=\(f),width=64,height=48,frames=6", "--output", movie]) == 0, "\(f)")
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/ffprobe")
            p.arguments = ["-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", movie]
            let out = Pipe()
            p.standardOutput = out
            try p.run()
            p.waitUntilExit()
            let frames = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(frames == "6", "\(f): ffprobe read \(frames) frames")
            // Paced (half a second of frames): an unpaced 30-frame pattern could end before the
            // capture was asked for, under a loaded CI (the stream ended during the warm-up).
            #expect(CLIExit.run(["snap", "--device", "pattern:format=\(f),width=64,height=48,frames=30,fps=60,paced=true", "--output", s.path("\(f).jpg")]) == 0, "\(f)")
            #expect(try Data(contentsOf: URL(fileURLWithPath: s.path("\(f).jpg"))).prefix(2) == Data([0xFF, 0xD8]))
            // A dump of it exports to a movie and to y4m (demosaiced; it failed, leaving stubs).
            let dump = s.path("\(f).vfdump")
            #expect(CLIExit.run(["dump", "--device", "pattern:format=\(f),width=64,height=48,frames=5", "--output", dump]) == 0, "\(f)")
            #expect(CLIExit.run(["export", dump, s.path("\(f)-x.mov")]) == 0, "\(f)")
            #expect(CLIExit.run(["export", dump, s.path("\(f)-x.y4m")]) == 0, "\(f)")
            #expect(try Self.framesIn(y4m: s.path("\(f)-x.y4m")) == 5)
        }
        // RGB dumps too.
        let rgb = s.path("rgb.vfdump")
        #expect(CLIExit.run(["dump", "--device", "pattern:format=rgb24,width=64,height=48,frames=5", "--output", rgb]) == 0)
        #expect(CLIExit.run(["export", rgb, s.path("rgb.y4m")]) == 0)
        #expect(try Self.framesIn(y4m: s.path("rgb.y4m")) == 5)
    }

    /// A negative number is read as the value it is and refused by its range (1 Dec sweep: "Missing
    /// value for '--frames <frames>'", as if nothing had been given).
    @Test func aNegativeNumberIsRefusedAsTheValueItIs() {
        let cases: [[String]] = [
            ["run", "--frames", "-1"], ["dump", "--frames", "-3"], ["snap", "--burst", "-2"], ["snap", "--warmup", "-1"],
            ["snap", "--quality", "-5"], ["record", "--fragment", "-1"], ["record", "--pre-roll", "-2"], ["record", "--threads", "-1"],
            ["record", "--max-size", "-5M"], ["record", "--buffer-budget", "-1"], ["dump", "--acceleration", "-1"],
            ["bench", "--steps", "-1"], ["bench", "--max-control-latency", "-1"], ["preview", "--port", "-1"], ["run", "--shm", "x", "--shm-slots", "-4"],
            // Options that mean nothing without another, or contradict it.
            ["run", "--shm-slots", "4"], ["record", "--pre-roll", "2", "--duration", "1"],
        ]
        for args in cases {
            let message = CLIExit.message(for: Self.parseError(args))
            #expect(!message.contains("Missing value"), "\(args): \(message)")
            #expect(CLIExit.run(args) == 64, "\(args)")
        }
    }

    static func parseError(_ args: [String]) -> any Error {
        do {
            var c = try ViewfinderCommand.parseAsRoot(args)
            try c.validate()
            return CancellationError()
        } catch { return error }
    }

    /// An output that cannot start ends the run (1 Dec sweep: a `--metadata` or `--output` fifo
    /// with no reader, a ring /dev/shm had no room for, left the camera capturing into nothing —
    /// every frame dropped — until Ctrl-C).
    @Test func anOutputThatCannotStartEndsTheRun() throws {
        let s = Scratch()
        let lonely = s.path("nobody.fifo")
        #expect(mkfifo(lonely, 0o644) == 0)
        for args in [["--metadata", lonely], ["--output", lonely], ["--output", lonely, "--output-format", "raw"]] {
            let t0 = monotonicNanoseconds()
            #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,fps=30,paced=true", "--duration", "30"] + args) == 1, "\(args)")
            let took = Double(monotonicNanoseconds() - t0) / 1e9
            #expect(took < 10, "\(args): ran \(took) s")
        }
    }

    /// A still's or a report's file is checked by `AtomicFile`'s own rule before anything is
    /// captured (1 Dec: `snap -o /tmp` said "'/tmp' exists; add --force", and a missing folder was
    /// found only after the capture).
    @Test func stillsAndReportsAreCheckedWhereTheyWillBeWrittenBeforeCapturing() throws {
        let s = Scratch()
        #expect(throws: SinkError.self) { try AtomicFile.checkWritable(s.dir) }
        #expect(throws: SinkError.self) { try AtomicFile.checkWritable(s.path("missing/a.jpg")) }
        var bst = stat()
        if stat("/dev/loop0", &bst) == 0, bst.st_mode & S_IFMT == S_IFBLK {
            #expect(throws: SinkError.self) { try AtomicFile.checkWritable("/dev/loop0") }   // a block device: refused
        }
        #expect(throws: Never.self) { try AtomicFile.checkWritable(s.path("new.jpg")) }
        #expect(throws: Never.self) { try AtomicFile.checkWritable("/dev/null") }
        #expect(!FileManager.default.fileExists(atPath: s.path("new.jpg")), "the check created the file")
        // A link into a missing folder: where the write would land, refused.
        #expect(symlink(s.path("missing/b.jpg"), s.path("dangling.jpg")) == 0)
        #expect(throws: SinkError.self) { try AtomicFile.checkWritable(s.path("dangling.jpg")) }
        do {
            try AtomicFile.checkWritable(s.dir)
        } catch {
            #expect("\(error)".contains("is a folder"), "\(error)")
        }
        #expect(CLIExit.run(["snap", "--device", "sim:width=160,height=120", "--output", s.dir]) == 1)
        #expect(CLIExit.run(["snap", "--device", "sim:width=160,height=120", "--output", s.dir, "--force"]) == 1)
        #expect(CLIExit.run(["snap", "--device", "sim:width=160,height=120", "--output", s.path("missing/a.jpg")]) == 1)
        #expect(CLIExit.run(["snap", "--device", "sim:width=160,height=120", "--burst", "2", "--output", s.path("missing/a.jpg")]) == 1)
        #expect(CLIExit.run(["bench", "--device", "sim:width=160,height=120", "--duration", "0.5", "--controls", "none", "--report", s.dir]) == 1)
    }

    @Test func snapEmbedsAnExifThumbnailWhenAsked() throws {
        let s = Scratch()
        let plain = s.path("plain.jpg"), thumbed = s.path("thumb.jpg")
        #expect(CLIExit.run(["snap", "--device", "sim:width=320,height=240", "-o", plain]) == 0)
        #expect(CLIExit.run(["snap", "--device", "sim:width=320,height=240", "--thumbnail", "-o", thumbed]) == 0)
        // The thumbnail is a second JPEG (SOI … EOI) inside the APP1 segment: one more SOI marker.
        func sois(_ path: String) throws -> Int {
            let b = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            return zip(b, b.dropFirst()).filter { $0 == 0xFF && $1 == 0xD8 }.count
        }
        #expect(try sois(thumbed) == sois(plain) + 1)
        #expect(CLIExit.run(["snap", "--device", "sim:width=320,height=240", "--thumbnail", "--raw", "-o", s.path("r.vfraw")]) == 64)
    }
}

extension UserInputTests {
    /// A tmpfs of `size` (`1m`, `2m`) mounted at `path` (created), for a disk that fills; root only.
    static func mountSmallDisk(_ path: String, size: String) throws -> String {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let mount = Process()
        mount.executableURL = URL(fileURLWithPath: "/bin/mount")
        mount.arguments = ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", path]
        mount.standardError = FileHandle.nullDevice
        try mount.run()
        mount.waitUntilExit()
        try #require(mount.terminationStatus == 0, "cannot mount a tmpfs")
        return path
    }

    static func unmount(_ path: String) {
        let u = Process()
        u.executableURL = URL(fileURLWithPath: "/bin/umount")
        u.arguments = [path]
        try? u.run()
        u.waitUntilExit()
    }

    static let fullStderrChildEnv = "VF_TEST_FULL_STDERR_CHILD"

    /// The child of `aStandardErrorThatCannotBeWrittenIsNoCrash`: the command in the variable
    /// (arguments separated by tabs), its status as the exit status.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[fullStderrChildEnv] != nil))
    func fullStderrChild() {
        let args = ProcessInfo.processInfo.environment[Self.fullStderrChildEnv]!.split(separator: "\t").map(String.init)
        exit(CLIExit.run(args))
    }

    /// Standard error on a full disk (`2>>log`, here /dev/full) or closed: the error line and the
    /// summaries that go there are lost, the command is not (2 Dec sweep: Foundation's
    /// FileHandle.write trapped, exit 132 instead of 1, and instead of 0 after a whole export).
    @Test func aStandardErrorThatCannotBeWrittenIsNoCrash() throws {
        let s = Scratch()
        let dump = s.path("e.vfdump")
        #expect(CLIExit.run(["dump", "--device", "pattern:width=64,height=32,frames=4", "--output", dump]) == 0)
        for (args, status) in [(["export", s.path("missing.vfdump"), s.path("m.y4m")], Int32(1)),
                               (["run", "--device", "/dev/video-none"], 1),
                               (["export", dump, s.path("e.y4m")], 0)] {
            let child = Process()
            child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
            child.arguments = ["--testing-library", "swift-testing", "--filter", "fullStderrChild"]
            child.environment = ProcessInfo.processInfo.environment.merging([Self.fullStderrChildEnv: args.joined(separator: "\t")]) { $1 }
            child.standardOutput = FileHandle.nullDevice
            child.standardError = try #require(FileHandle(forWritingAtPath: "/dev/full"))
            try child.run()
            child.waitUntilExit()
            #expect(child.terminationReason == .exit && child.terminationStatus == status,
                    "\(args[0]): \(child.terminationReason == .exit ? "exit" : "signal") \(child.terminationStatus)")
        }
        #expect(try Y4MReader(path: s.path("e.y4m")).header.width == 64)
    }

    static let logChildEnv = "VF_TEST_LOG_CHILD"

    /// The child of `aFailureIsSaidOnceNotAgainByTheLibrariesLogs`: the command line's logging as
    /// `main` sets it up, then the command in the variable (tab-separated).
    @Test(.enabled(if: ProcessInfo.processInfo.environment[logChildEnv] != nil))
    func logChild() {
        ViewfinderCommand.bootstrapLogging()
        let args = ProcessInfo.processInfo.environment[Self.logChildEnv]!.split(separator: "\t").map(String.init)
        exit(CLIExit.run(args))
    }

    /// A failing command says its error once (`viewfinder: error: …`): the outputs' and the
    /// session's own error logs of the same failure are not printed above it (before, a frame
    /// output on a full disk printed it three times); an error log that says something else is.
    @Test func aFailureIsSaidOnceNotAgainByTheLibrariesLogs() throws {
        let s = Scratch()
        for (args, status) in [(["run", "--device", "pattern:width=64,height=32,frames=3", "--output", "/dev/full"], Int32(1)),
                               (["run", "--device", "pattern:width=64,height=32,frames=3"], 0)] {
            let child = Process()
            child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
            child.arguments = ["--testing-library", "swift-testing", "--filter", "logChild"]
            child.environment = ProcessInfo.processInfo.environment.merging([Self.logChildEnv: args.joined(separator: "\t")]) { $1 }
            child.standardOutput = FileHandle.nullDevice
            let err = s.path("err-\(status).txt")
            FileManager.default.createFile(atPath: err, contents: nil)
            child.standardError = try #require(FileHandle(forWritingAtPath: err))
            try child.run()
            child.waitUntilExit()
            #expect(child.terminationStatus == status)
            let lines = try String(contentsOfFile: err, encoding: .utf8).split(separator: "\n")
            let said = lines.filter { $0.contains("no space left") }
            if status == 1 {
                #expect(said.count == 1 && said.first?.hasPrefix("viewfinder: error: ") == true, "\(lines)")
            } else {
                #expect(!lines.contains { $0.contains("error") }, "\(lines)")
            }
        }
        // Held lines that are not the command's error are printed, before its error line.
        let held = HeldErrorLines()
        held.hold(message: "frame output 'x': disk full", line: "A frame output 'x': disk full\n")
        held.hold(message: "movie: encoding frame 3 failed", line: "B movie: encoding frame 3 failed\n")
        var printed = ""
        held.release(before: "disk full") { printed += $0 }
        #expect(printed == "B movie: encoding frame 3 failed\n")
    }

    /// A full disk under `run --output x.y4m` and `--metadata`: the files end at their last whole
    /// frame and line, so every reader takes them (2 Dec sweep: a torn last frame made the y4m
    /// unreadable by `process` and `export`, and the metadata file ended in half a line while the
    /// summary counted lines never written).
    @Test(.enabled(if: geteuid() == 0, "mounting a small tmpfs needs root (CI runs as root)"))
    func aFullDiskLeavesWholeFramesAndLines() throws {
        let s = Scratch()
        let disk = try Self.mountSmallDisk(s.path("full"), size: "1m")
        defer { Self.unmount(disk) }
        // 320x180 YUYV: 115200 bytes a frame in y4m, a 1 MiB disk holds 9 and a torn tenth.
        #expect(CLIExit.run(["run", "--device", "pattern:width=320,height=180,frames=40", "--output", disk + "/x.y4m"]) == 1)
        // (The reader closes the file when it returns: its space is free after the removal.)
        #expect(try Self.framesIn(y4m: disk + "/x.y4m") >= 5)
        try FileManager.default.removeItem(atPath: disk + "/x.y4m")
        // The same on the y4m writer's general path (an odd width: not the planes-as-they-lie one).
        #expect(CLIExit.run(["run", "--device", "pattern:format=grey,width=321,height=181,frames=40", "--output", disk + "/g.y4m"]) == 1)
        #expect(try Self.framesIn(y4m: disk + "/g.y4m") >= 5)
        try FileManager.default.removeItem(atPath: disk + "/g.y4m")
        // The metadata file fills the disk the same way (a filler first leaves little room).
        let filler = try #require(FileHandle(forWritingAtPath: disk + "/filler") ?? {
            FileManager.default.createFile(atPath: disk + "/filler", contents: nil)
            return FileHandle(forWritingAtPath: disk + "/filler")
        }())
        try? filler.write(contentsOf: Data(count: 900_000))
        try? filler.close()
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3000,fps=1000", "--metadata", disk + "/m.jsonl"]) == 1)
        let text = try String(contentsOfFile: disk + "/m.jsonl", encoding: .utf8)
        #expect(!text.isEmpty && text.hasSuffix("\n"), "the metadata file ends in a torn line")
        for line in text.split(separator: "\n") { #expect((try? JSONSerialization.jsonObject(with: Data(line.utf8))) != nil) }
        // `process --metadata` on the full disk names the file.
        let input = s.path("in.y4m")
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3000", "--output", input]) == 0)
        #expect(CLIExit.run(["process", "--input", input, "--output", "/dev/null", "--metadata", disk + "/p.jsonl"]) == 1)
        let p = try String(contentsOfFile: disk + "/p.jsonl", encoding: .utf8)
        #expect(p.isEmpty || p.hasSuffix("\n"))
    }

    static let hangupChildEnv = "VF_TEST_HANGUP_CHILD"

    /// The child of `aClosedTerminalEndsTheRunAsCtrlCDoes`: a 30 s dump, its status as the exit status.
    @Test(.enabled(if: ProcessInfo.processInfo.environment[hangupChildEnv] != nil))
    func hangupChild() {
        let path = ProcessInfo.processInfo.environment[Self.hangupChildEnv]!
        // As in a terminal, whatever the test runner inherited (`nohup` ignores it).
        signal(SIGHUP, SIG_DFL)
        exit(CLIExit.run(["dump", "--device", "pattern:width=64,height=32,fps=30,paced=true", "--duration", "30", "--output", path]))
    }

    /// SIGHUP (the terminal closed, an ssh session dropped) ends a run as Ctrl-C does: the dump is
    /// finished and replays (2 Dec: it killed the process, leaving a dump without its index and,
    /// for `--shm`, the ring in /dev/shm).
    @Test func aClosedTerminalEndsTheRunAsCtrlCDoes() throws {
        let s = Scratch()
        let path = s.path("hangup.vfdump")
        let child = Process()
        child.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        child.arguments = ["--testing-library", "swift-testing", "--filter", "hangupChild"]
        child.environment = ProcessInfo.processInfo.environment.merging([Self.hangupChildEnv: path]) { $1 }
        child.standardOutput = FileHandle.nullDevice
        child.standardError = FileHandle.nullDevice
        try child.run()
        // Wait for the dump to hold frames (its file grows past the stream header), then hang up.
        let deadline = monotonicNanoseconds() + 20_000_000_000
        while monotonicNanoseconds() < deadline, Self.size(path) < 4096 { usleep(50_000) }
        usleep(300_000)
        let t0 = monotonicNanoseconds()
        kill(child.processIdentifier, SIGHUP)
        child.waitUntilExit()
        let took = Double(monotonicNanoseconds() - t0) / 1e9
        #expect(child.terminationReason == .exit && child.terminationStatus == 0,
                "\(child.terminationReason == .exit ? "exit" : "signal") \(child.terminationStatus)")
        #expect(took < 5, "took \(took) s to stop")
        let info = try RawDumpReader(path: path)
        #expect(info.frameCount > 0)
    }
}
