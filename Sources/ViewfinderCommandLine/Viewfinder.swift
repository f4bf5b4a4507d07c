import ArgumentParser
import Foundation
import Logging
import ViewfinderKit
import ViewfinderBench

/// The `viewfinder` command line, for the `viewfinder` executable and for a program of your own
/// that runs it with stages of its own: every command — `run`, `process`, `bench`, `preview`,
/// `snap`, `record`, `dump`, `stages` — then knows them by name, as it knows the built-in ones.
///
/// ```swift
/// // Sources/my-viewfinder/main.swift, in a package whose MyStages target uses StageRegistryPlugin
/// import MyStages
/// import ViewfinderCommandLine
/// import ViewfinderKit          // StageRegistry.builtIn
///
/// ViewfinderCommandLine.main(stages: try .builtIn.merging(.myStages))
/// ```
///
/// `swift run my-viewfinder run --device sim --stages negative:strength=0.5 --metadata m.jsonl`
public enum ViewfinderCommandLine {
    private static let registry = LockedBox<StageRegistry>(.builtIn)
    /// One command line at a time: the commands read the registry as they go.
    private static let running = NSLock()

    /// The stages the commands know by name.
    static var stages: StageRegistry { registry.withLock { $0 } }

    /// Runs the command line (`CommandLine.arguments`) with `stages` and exits with its status:
    /// 0, 64 for a usage error, 1 for a runtime error (`viewfinder --help`). With
    /// `bootstrapLogging` (leave it out if your program set up swift-log itself: it can be set up
    /// only once), log lines go to standard error from `warning` up (`VIEWFINDER_LOG_LEVEL` sets
    /// another level).
    public static func main(stages: StageRegistry = .builtIn, bootstrapLogging: Bool = true) -> Never {
        if bootstrapLogging { ViewfinderCommand.bootstrapLogging() }
        Foundation.exit(run(Array(CommandLine.arguments.dropFirst()), stages: stages))
    }

    /// Runs one command line (`["run", "--device", "sim", …]`, without the program's name) with
    /// `stages` and returns its exit status; errors are printed to standard error as `main` does.
    /// Command lines run one at a time: a second call waits for the first. While a command runs,
    /// Ctrl-C and SIGTERM stop it; the process's own handling of them is restored afterwards.
    public static func run(_ arguments: [String], stages: StageRegistry = .builtIn) -> Int32 {
        running.lock(); defer { running.unlock() }
        registry.withLock { $0 = stages }
        return CLIExit.run(arguments)
    }
}

struct ViewfinderCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "viewfinder",
        abstract: "Capture camera frames on Linux through a chain of stages into sinks.",
        discussion: """
        Errors: every error is one line on standard error, `viewfinder: error: <what went wrong>`, \
        and the exit status says which kind it is: \(CLIExit.usage) for a usage error (an unknown \
        or malformed argument, an unknown stage, device option or stage option, a value out of its \
        range, a bad pipeline file: nothing was captured), \(CLIExit.runtime) for a runtime error \
        (a device that cannot be opened or disconnects, a stream that stalls, a file that cannot \
        be written), 0 for success.
        """,
        subcommands: CLISubcommands.all
    )

    /// The libraries' log lines on standard error from `warning` up (the server's "listening" and
    /// other notes are not a command's output); `VIEWFINDER_LOG_LEVEL` (trace, debug, info,
    /// notice, warning, error, critical) sets another level.
    static func bootstrapLogging() {
        let level = ProcessInfo.processInfo.environment["VIEWFINDER_LOG_LEVEL"].flatMap { Logger.Level(rawValue: $0.lowercased()) } ?? .warning
        LoggingSystem.bootstrap { label in CommandLineLogHandler(label: label, logLevel: level) }
    }
}

/// The CLI's error format and exit statuses (`viewfinder --help` documents them).
enum CLIExit {
    /// The command line (or the pipeline file or device string it names) is wrong (BSD `EX_USAGE`).
    static let usage: Int32 = 64
    /// The command was right but running it failed.
    static let runtime: Int32 = 1

    static func run(_ arguments: [String]) -> Int32 {
        do {
            // A first word that names no command is that error, whatever follows: the parser
            // answered `viewfinder info --help` with the top-level help and exit 0, while
            // `viewfinder info` was a usage error.
            if let first = arguments.first, !first.hasPrefix("-"), first != "help" {
                let names = CLISubcommands.all.map { $0.configuration.commandName ?? "" }
                if !names.contains(first) {
                    throw ValidationError("unknown command '\(first)' (commands: \(names.joined(separator: ", ")); see viewfinder --help)")
                }
            }
            var command = try ViewfinderCommand.parseAsRoot(arguments)
            try command.run()
            HeldErrorLines.shared.release(before: nil)
            return 0
        } catch {
            return report(error)
        }
    }

    /// Prints the error (help and version go to standard output) and gives the exit status.
    static func report(_ error: any Error) -> Int32 {
        if let code = error as? ExitCode { HeldErrorLines.shared.release(before: nil); return code.rawValue }
        let parserCode = ViewfinderCommand.exitCode(for: error)
        if parserCode == .success {
            HeldErrorLines.shared.release(before: nil)
            print(ViewfinderCommand.fullMessage(for: error))
            return 0
        }
        let text = message(for: error)
        // The libraries' log lines that said this already are not printed above it.
        HeldErrorLines.shared.release(before: text)
        var stderr = StandardError()
        print("viewfinder: error: \(text)", to: &stderr)
        return status(for: error)
    }

    /// The one-line message: our errors describe themselves; the parser's own are its message.
    static func message(for error: any Error) -> String {
        switch error {
        case is ConfigurationError, is DeviceError, is SessionError, is RuntimeFailure, is BenchError: return "\(error)"
        default:
            let m = ViewfinderCommand.message(for: error)
            return m.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }.joined(separator: "; ")
        }
    }

    static func status(for error: any Error) -> Int32 {
        switch error {
        case is ValidationError, is ConfigurationError: return usage
        case BenchError.badBaseline: return usage
        case is BenchError: return runtime
        case DeviceError.invalidDeviceOption: return usage
        // A device string no kind of device takes (`bogus`, `SIM`) is malformed, not a camera
        // that could not be opened (`/dev/video9`, a missing dump file: runtime).
        case DeviceError.unknownDevice(let id, _) where !DeviceDirectory.standard.providers.contains(where: { $0.handles(id) }): return usage
        // A control named or valued wrongly by the user (`controls --set gain=99999`, `--set nosuch=1`).
        case DeviceError.unknownControl, DeviceError.controlOutOfRange: return usage
        // Photo settings out of range (--bracket=-20,20) or contradictory (--burst with --bracket).
        case PhotoCaptureError.invalidSettings: return usage
        // A malformed --audio-format (rate=0, format=u8, an unknown key).
        case AudioError.invalidRequest: return usage
        case is DeviceError, is SessionError, is RuntimeFailure: return runtime
        default:
            // The parser's own errors (unknown flag, missing value) are usage errors; anything else
            // a command threw is a runtime error.
            return ViewfinderCommand.exitCode(for: error) == .validationFailure ? usage : runtime
        }
    }
}

/// A runtime failure the command found itself (no error type of the library says it).
struct RuntimeFailure: Error, CustomStringConvertible { let message: String; var description: String { message } }

extension RuntimeFailure {
    /// "cannot create the metadata file 'm.jsonl': a fifo with no reader …" from `StreamFile`'s error.
    static func cannotCreate(_ what: String, _ path: String, _ error: any Error) -> RuntimeFailure {
        if case StreamFileError.cannotOpen(_, _, let message) = error { return RuntimeFailure(message: "cannot create the \(what) '\(path)': \(message)") }
        return RuntimeFailure(message: "cannot create the \(what) '\(path)': \(error)")
    }
}

struct StandardError: TextOutputStream {
    mutating func write(_ s: String) { StandardStreams.error(s) }
}

func jsonString(_ value: Any) -> String {
    guard let d = try? JSONSerialization.data(withJSONObject: value, options: [.sortedKeys, .prettyPrinted]) else { return "{}" }
    return String(decoding: d, as: UTF8.self)
}
