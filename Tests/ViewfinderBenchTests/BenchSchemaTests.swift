import Foundation
import Testing
@testable import ViewfinderBench

/// The README's list of `bench --json` keys is the schema users read: every key of a real report
/// (controls, a sweep, drops, a comparison) must be on it.
@Suite struct BenchSchemaTests {
    /// The key paths the README documents, `<…>` for a varying name.
    static func documentedPaths() throws -> [[String]] {
        let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md")
        let text = try String(contentsOf: readme, encoding: .utf8)
        guard let start = text.range(of: "<!-- bench-json-schema -->\n```\n"),
              let end = text.range(of: "\n```", range: start.upperBound..<text.endIndex) else { return [] }
        // Comments in parentheses out; tokens split on white space outside braces.
        var body = String(text[start.upperBound..<end.lowerBound])
        while let open = body.firstIndex(of: "("), let close = body[open...].firstIndex(of: ")") { body.removeSubrange(open...close) }
        var tokens: [String] = [], current = "", depth = 0
        for ch in body {
            if ch == "{" { depth += 1 } else if ch == "}" { depth -= 1 }
            if ch.isWhitespace && depth == 0 {
                if !current.isEmpty { tokens.append(current); current = "" }
            } else { current.append(ch) }
        }
        if !current.isEmpty { tokens.append(current) }
        let dist = ["count", "min", "max", "mean", "stddev", "p50", "p90", "p99"]
        var paths: [String] = []
        for raw in tokens {
            let t = raw.replacingOccurrences(of: "?", with: "").filter { !$0.isWhitespace }
            if t.hasSuffix("{dist}") {
                let base = String(t.dropLast(6))
                paths += dist.map { base + "." + $0 }
            } else if let brace = t.range(of: ".{"), t.hasSuffix("}") {
                let prefix = String(t[..<brace.lowerBound])
                paths += t[brace.upperBound..<t.index(before: t.endIndex)].split(separator: ",").map { prefix + "." + $0 }
            } else {
                paths.append(t)
            }
        }
        return paths.map { $0.split(separator: ".").map(String.init) }
    }

    /// The leaf key paths of a JSON value (`a.b[].c`; an array of numbers is one leaf `a[]`).
    static func leafPaths(_ v: Any, _ prefix: [String] = []) -> [[String]] {
        if let d = v as? [String: Any] {
            return d.flatMap { leafPaths($0.value, prefix + [$0.key]) }
        }
        if let a = v as? [Any], !prefix.isEmpty {
            var p = prefix
            p[p.count - 1] += "[]"
            let objects = a.compactMap { $0 as? [String: Any] }
            if !objects.isEmpty && objects.count == a.count { return objects.flatMap { leafPaths($0, p) } }
            return [p]
        }
        return [prefix]
    }

    static func matches(_ path: [String], _ pattern: [String]) -> Bool {
        path.count == pattern.count && zip(path, pattern).allSatisfy { $1.hasPrefix("<") || $0 == $1 }
    }

    @Test func everyKeyOfARealReportIsInTheReadmesList() throws {
        let documented = try Self.documentedPaths()
        #expect(documented.count > 80, "the README's list was not found or not read")
        var c = BenchConfiguration(device: "sim:width=160,height=120,fps=60")
        c.durationSeconds = 0.5
        c.stages = "exposure"
        c.controls = [.exposure]
        c.stepsPerControl = 1
        var report = try BenchRunner(configuration: c).run()
        report.comparison = report.compared(with: report)
        // The keys a run shows only sometimes: an early end, drops on the path and at an output.
        report.camera.endedEarlyAfterFrames = 1
        report.pipeline.drops["late"] = 1
        // A sweep's entries (a real sweep opens the device 28 times: a minute of the suite).
        report.sweep = [SweepEntry(pixelFormat: "yuyv", width: 640, height: 480, nominalFps: 60, measuredFps: 60, frames: 7, framesMissing: 0,
                                   deliveredFps: 60, deliversNominalRate: true, error: "x")]
        if !report.pipeline.outputs.isEmpty { report.pipeline.outputs[0].drops["ring_full"] = 1 }
        let json = try JSONSerialization.jsonObject(with: try report.jsonData())
        let leaves = Self.leafPaths(json)
        #expect(leaves.contains { $0.first == "sweep[]" } && leaves.contains { $0 == ["pipeline", "drops", "late"] })
        let undocumented = Set(leaves.filter { leaf in !documented.contains { Self.matches(leaf, $0) } }.map { $0.joined(separator: ".") })
        #expect(undocumented.isEmpty, "keys of the JSON not in the README's list: \(undocumented.sorted())")
    }
}
