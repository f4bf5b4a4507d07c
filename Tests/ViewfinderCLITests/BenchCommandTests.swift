import Testing
import Foundation
@testable import ViewfinderCommandLine
import ViewfinderBench

/// `viewfinder bench`: its usage and runtime errors follow the CLI's scheme, and a short run on
/// the sim camera writes a JSON report and an HTML report.
@Suite struct BenchCommandTests {
    @Test func usageErrorsExit64() {
        #expect(CLIExit.run(["bench", "--controls", "shutter"]) == 64)
        #expect(CLIExit.run(["bench", "--duration", "0"]) == 64)
        #expect(CLIExit.run(["bench", "--fail-on-regression"]) == 64)
        #expect(CLIExit.run(["bench", "--device", "sim:latency=0"]) == 64)
        // A baseline that cannot be read is found before the run.
        #expect(CLIExit.run(["bench", "--device", "sim:width=320,height=240", "--baseline", "/nonexistent/old.json"]) == 64)
        // An empty report path (an unset variable) before the run, not "rename failed" after it.
        #expect(CLIExit.run(["bench", "--device", "sim:width=320,height=240", "--controls", "none", "--report", ""]) == 64)
    }

    /// A baseline that was itself interrupted is refused before the run: its missing parts would
    /// read as changes (it was compared, "0 regressions").
    @Test func anInterruptedBaselineIsRefused() throws {
        var c = BenchConfiguration(device: "sim:width=320,height=240,fps=60")
        c.durationSeconds = 0.3
        c.controls = []
        var old = try BenchRunner(configuration: c).run()
        old.interruptedDuring = "the pipeline run"
        let json = FileManager.default.temporaryDirectory.appendingPathComponent("vf-bench-int-\(getpid()).json")
        defer { try? FileManager.default.removeItem(at: json) }
        try old.jsonData().write(to: json)
        #expect(CLIExit.run(["bench", "--device", "sim:width=320,height=240,fps=60", "--duration", "0.3", "--controls", "none", "--baseline", json.path]) == 64)
    }

    /// No measurement is blamed on the device when the run was shorter than two of its frames, or
    /// was interrupted before them.
    @Test func noFramesSaysWhyWithoutBlamingTheDevice() throws {
        var c = BenchConfiguration(device: "sim:width=320,height=240,fps=30")
        c.durationSeconds = 0.02
        c.controls = []
        #expect(throws: BenchError.self) { try BenchRunner(configuration: c).run() }
        do { _ = try BenchRunner(configuration: c).run() } catch let e as BenchError {
            guard case .durationTooShort(_, _, let frames, let fps) = e else { Issue.record("\(e)"); return }
            #expect(frames < 2 && fps == 30)
            #expect("\(e)".contains("longer --duration"))
        }
        c.device = "sim:width=320,height=240,fps=0.5"
        c.durationSeconds = 30
        let runner = BenchRunner(configuration: c)
        let trip = runner.interrupter
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.5) { trip() }
        let t0 = Date()
        do { _ = try runner.run(); Issue.record("a run with no frames measured something") } catch let e as BenchError {
            guard case .interruptedBeforeFrames = e else { Issue.record("\(e)"); return }
            #expect("\(e)".contains("interrupted"))
        }
        #expect(Date().timeIntervalSince(t0) < 10)
    }

    @Test func runtimeErrorsExit1() {
        #expect(CLIExit.run(["bench", "--device", "/dev/video-none", "--duration", "0.5"]) == 1)
        #expect(CLIExit.run(["bench", "--device", "sim:width=320,height=240", "--duration", "0.5", "--controls", "none", "--report", "/nonexistent/dir/r.html"]) == 1)
        // The message names the file once.
        #expect(throws: BenchError.self) { try BenchCommand.checkWritable("/nonexistent/dir/r.html") }
        do { try BenchCommand.checkWritable("/nonexistent/dir/r.html") } catch {
            let m = CLIExit.message(for: error)
            #expect(m.components(separatedBy: "/nonexistent/dir/r.html").count == 2, "\(m)")
        }
    }

    @Test func writesTheReportsAndComparesWithABaseline() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("vf-bench-cli-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let html = dir.appendingPathComponent("r.html").path
        #expect(CLIExit.run(["bench", "--device", "sim:width=320,height=240,fps=60,latency=2", "--duration", "0.5", "--controls", "gain", "--steps", "1", "--report", html]) == 0)
        let page = try String(contentsOfFile: html, encoding: .utf8)
        #expect(page.contains("gain step response"))
        // A baseline whose capture-to-output latency was a hundredth of any real run's: the new
        // run regresses there, and --fail-on-regression makes that exit 1.
        var c = BenchConfiguration(device: "sim:width=320,height=240,fps=60")
        c.durationSeconds = 0.5
        c.controls = []
        var old = try BenchRunner(configuration: c).run()
        old.series.captureToOutputMs = old.series.captureToOutputMs.map { $0 / 100 }
        old.pipeline.captureToOutputMs = Distribution(old.series.captureToOutputMs)
        let json = dir.appendingPathComponent("old.json")
        try old.jsonData().write(to: json)
        let args = ["bench", "--device", "sim:width=320,height=240,fps=60", "--duration", "1", "--controls", "none", "--baseline", json.path]
        #expect(CLIExit.run(args + ["--fail-on-regression"]) == 1)
        #expect(CLIExit.run(args) == 0)
    }
}
