import Foundation
import Testing
import ViewfinderKit
@testable import ViewfinderCommandLine

/// A user's stage, known to the command line only through `ViewfinderCommandLine.run(_:stages:)`.
final class BrightestRowStage: Stage {
    static let name = "brightest_row_test"
    static let summary = "Publishes the index of the brightest luma row."
    struct Options: StageOptions {
        var every = 1
        init() {}
        static var fields: [OptionField<Options>] { [.int("every", \.every, range: 1...10, "measure every n-th frame")] }
    }
    let every: Int
    let key = MetadataKey("brightest_row_test.row")
    init(options: Options) { every = options.every }
    func prepare(format: FrameFormat, context: StageContext) throws {}
    func process(_ frame: Frame) -> StageVerdict {
        guard Int(frame.sequence) % every == 0, let p = frame.pixels else { return .forward }
        var best = (row: 0, sum: -1)
        for y in 0..<p.luma.height {
            var s = 0
            for x in 0..<p.luma.width { s += Int(p.luma[x, y]) }
            if s > best.sum { best = (y, s) }
        }
        frame.metadata.custom.set(key, Double(best.row))
        return .forward
    }
}

@Suite(.serialized) struct CommandLineStagesTests {
    @Test func aProgramOfItsOwnRunsTheCommandLineWithItsStagesByName() throws {
        let mine = try StageRegistry.builtIn.merging(StageRegistry([BrightestRowStage.self]))
        defer { _ = ViewfinderCommandLine.run(["stages"], stages: .builtIn) }
        let dir = NSTemporaryDirectory() + "vf-cli-stages-\(getpid())"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let meta = dir + "/m.jsonl"
        // The stock command does not know the stage (a usage error); the user's program does.
        #expect(ViewfinderCommandLine.run(["run", "--device", "pattern:width=64,height=32,frames=4", "--stages", "brightest_row_test"], stages: .builtIn) == 64)
        #expect(ViewfinderCommandLine.run(["run", "--device", "pattern:width=64,height=32,frames=4", "--stages", "brightest_row_test:every=2,null", "--metadata", meta], stages: mine) == 0)
        let lines = try String(contentsOfFile: meta, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 4)
        #expect(lines.filter { $0.contains("\"brightest_row_test.row\":") }.count == 2)
        // Its options are checked as the built-in stages' are; process and bench know it too.
        #expect(ViewfinderCommandLine.run(["run", "--device", "pattern:width=64,height=32,frames=4", "--stages", "brightest_row_test:every=50"], stages: mine) == 64)
        let y4m = dir + "/in.y4m"
        #expect(ViewfinderCommandLine.run(["run", "--device", "pattern:width=64,height=32,frames=3", "--output", y4m], stages: mine) == 0)
        #expect(ViewfinderCommandLine.run(["process", "--input", y4m, "--output", dir + "/out.y4m", "--stages", "brightest_row_test", "--quiet"], stages: mine) == 0)
        #expect(ViewfinderCommandLine.run(["bench", "--device", "sim:width=160,height=120", "--duration", "0.3", "--controls", "none", "--stages", "brightest_row_test", "--json"], stages: mine) == 0)
    }
}
