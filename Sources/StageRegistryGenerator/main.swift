// Writes the stage registry of one target (see Scanner.swift for what counts as a stage):
//
//     extension StageRegistry { public static let <module>: StageRegistry = StageRegistry(generated: [A.self, …]) }
//
// Usage: StageRegistryGenerator <module-name> <output-file> <source-file>...
// A stage it cannot register fails the build with `file:line: error: …`.
import Foundation

let args = CommandLine.arguments
guard args.count >= 3 else {
    FileHandle.standardError.write(Data("usage: StageRegistryGenerator <module> <output> <sources...>\n".utf8))
    exit(2)
}
let module = args[1]
let output = args[2]
do {
    var declarations: [Declaration] = []
    for p in args.dropFirst(3).sorted() where !p.hasSuffix("GeneratedStageRegistry.swift") {
        declarations += StageScanner.declarations(in: try String(contentsOfFile: p, encoding: .utf8), file: p)
    }
    let stages = try StageScanner.stages(in: declarations).map {
        FoundStage(name: $0.name, isPublic: $0.isPublic, file: ($0.file as NSString).lastPathComponent, line: $0.line)
    }
    let text = StageScanner.render(module: module, stages: stages)
    let existing = try? String(contentsOfFile: output, encoding: .utf8)
    if existing != text { try text.write(toFile: output, atomically: true, encoding: .utf8) }
} catch let e as ScanFailure {
    FileHandle.standardError.write(Data((e.description + "\n").utf8))
    exit(1)
} catch {
    FileHandle.standardError.write(Data("error: StageRegistryGenerator: \(error)\n".utf8))
    exit(1)
}
