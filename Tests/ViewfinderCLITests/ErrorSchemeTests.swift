import Testing
import Foundation
import ArgumentParser
@testable import ViewfinderCommandLine
import ViewfinderKit

/// Every command's errors: one line, `viewfinder: error: …`, 64 for usage errors, 1 for runtime ones.
@Suite struct ErrorSchemeTests {
    @Test func usageErrorsExit64() {
        // A device option out of its rule (odd width for 4:2:2), an unknown stage, an unknown
        // stage option, the parser's own error, a command's own validation.
        #expect(CLIExit.run(["run", "--device", "pattern:width=63", "--frames", "3"]) == 64)
        #expect(CLIExit.run(["run", "--device", "sim:bogus=1", "--frames", "3"]) == 64)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32", "--stages", "nope", "--frames", "3"]) == 64)
        #expect(CLIExit.run(["process", "--input", "-", "--output", "-", "--stages", "stabilise:lookahed=3"]) == 64)
        #expect(CLIExit.run(["process", "--output", "-"]) == 64)
        #expect(CLIExit.run(["run", "--frames", "0"]) == 64)
        #expect(CLIExit.run(["frobnicate"]) == 64)
    }

    @Test func runtimeErrorsExit1() {
        #expect(CLIExit.run(["run", "--device", "dump:/nonexistent/x.vfdump", "--frames", "3"]) == 1)
        #expect(CLIExit.run(["process", "--input", "/nonexistent/in.y4m", "--output", "-"]) == 1)
        #expect(CLIExit.run(["run", "--device", "/dev/video-none", "--frames", "3"]) == 1)
    }

    /// A device string no kind of device takes, or a dump without its file, is a usage error
    /// (2 Dec, third session, sweep: both exited 1, as a camera that cannot be opened).
    @Test func malformedDeviceStringsAreUsageErrors() {
        for device in ["bogus", "SIM", "dump:"] {
            #expect(CLIExit.run(["run", "--device", device, "--frames", "3"]) == 64, "\(device)")
        }
        #expect(CLIExit.run(["bench", "--device", "bogus", "--duration", "0.2"]) == 64)
    }

    @Test func successAndHelpExit0() {
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=5", "--json"]) == 0)
        #expect(CLIExit.run(["--help"]) == 0)
    }

    @Test func messagesAreOneLine() throws {
        let parse = #expect(throws: (any Error).self) { _ = try ViewfinderCommand.parseAsRoot(["process", "--output", "-"]) }
        let m = CLIExit.message(for: try #require(parse))
        #expect(m == "Missing expected argument '--input <input>'")
        let d = CLIExit.message(for: DeviceError.invalidDeviceOption(device: "sim:fps=0", option: "fps", reason: "0 is outside 0.1...240"))
        #expect(d == "device 'sim:fps=0', option 'fps': 0 is outside 0.1...240")
        #expect(CLIExit.status(for: DeviceError.disconnected(device: "/dev/video0")) == 1)
        #expect(CLIExit.status(for: ConfigurationError.unknownStage("x", known: [])) == 64)
        #expect(CLIExit.status(for: ValidationError("bad")) == 64)
    }
}

extension ErrorSchemeTests {
    /// An option that the other options make meaningless is refused, not ignored without a word;
    /// a count that cannot be negative says its range; an empty pipeline file is named.
    @Test func optionsThatWouldBeIgnoredAreUsageErrors() throws {
        #expect(CLIExit.run(["snap", "--device", "pattern:width=64,height=32", "--raw", "--quality", "50", "-o", "/nonexistent/x.vfraw"]) == 64)
        #expect(CLIExit.run(["snap", "--device", "pattern:width=64,height=32", "--raw", "--subsampling", "420", "-o", "/nonexistent/x.vfraw"]) == 64)
        #expect(CLIExit.run(["dump", "--device", "pattern:width=64,height=32", "--compression", "none", "--acceleration", "4", "-o", "/nonexistent/x.vfdump"]) == 64)
        // An empty sound device or an empty item of its format (accepted, or exit 1).
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--audio", ""]) == 64)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--audio", "null", "--audio-format", ""]) == 64)
        #expect(CLIExit.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--audio", "null", "--audio-format", "rate=48000,,channels=2"]) == 64)
        // The same options where they mean something still parse.
        _ = try ViewfinderCommand.parseAsRoot(["dump", "--compression", "lz4", "--acceleration", "4"])
        _ = try ViewfinderCommand.parseAsRoot(["snap", "--quality", "50", "--subsampling", "420"])

        #expect(throws: DeviceError.invalidDeviceOption(device: "pattern:frames=-1", option: "frames", reason: "-1 is outside 0...\(UInt64.max)")) {
            _ = try PatternSource(deviceString: "pattern:frames=-1")
        }
        // A whole number in another notation is the integer it names (and not "out of range").
        #expect(try PatternSource(deviceString: "pattern:frames=1e3").options.frames == 1000)
        #expect(try PatternSource(deviceString: "pattern:frames=10.0").options.frames == 10)
        #expect(throws: DeviceError.invalidDeviceOption(device: "pattern:frames=1.5", option: "frames", reason: "expected an integer, got '1.5'")) {
            _ = try PatternSource(deviceString: "pattern:frames=1.5")
        }

        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("vf-empty-pipeline-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let empty = dir.appendingPathComponent("p.json").path
        try Data("{}".utf8).write(to: URL(fileURLWithPath: empty))
        #expect(throws: ConfigurationError.self) { _ = try PipelineConfiguration.load(path: empty) }
        try Data(#"{"stages": []}"#.utf8).write(to: URL(fileURLWithPath: empty))
        #expect(try PipelineConfiguration.load(path: empty).stages.isEmpty)
    }
}

extension ErrorSchemeTests {
    /// White balance on a monochrome camera is refused before capturing (2 Dec: it ran, stayed at
    /// 5200 K and said "adjusting" on every frame); on a colour one it runs.
    @Test func whiteBalanceOnAGreyCameraIsRefused() {
        #expect(CLIExit.run(["run", "--device", "sim:format=grey,width=320,height=180,frames=3,paced=false", "--stages", "white_balance:mode=continuous"]) == 64)
        #expect(CLIExit.run(["run", "--device", "sim:format=nv12,width=320,height=180,frames=3,paced=false", "--stages", "white_balance:mode=continuous"]) == 0)
    }
}
