import ArgumentParser
import Foundation
import ViewfinderKit

@main
struct ViewfinderCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "viewfinder",
        abstract: "Capture camera frames on Linux through a chain of stages into sinks.",
        subcommands: CLISubcommands.all
    )
}

/// Prints one clear line and exits non-zero, for every error a command meets.
func fail(_ error: any Error) -> ExitCode {
    var stderr = StandardError()
    print("viewfinder: error: \(error)", to: &stderr)
    return ExitCode(error is ValidationError ? 64 : 1)
}

struct StandardError: TextOutputStream {
    mutating func write(_ s: String) { FileHandle.standardError.write(Data(s.utf8)) }
}

func jsonString(_ value: Any) -> String {
    guard let d = try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .prettyPrinted]) else { return "{}" }
    return String(decoding: d, as: UTF8.self)
}
