import ArgumentParser

/// The subcommands, in the order `--help` shows them.
enum CLISubcommands {
    static var all: [any ParsableCommand.Type] {
        [RunCommand.self, PreviewCommand.self, ProcessCommand.self, SnapCommand.self, RecordCommand.self, DumpCommand.self, ExportCommand.self, DevicesCommand.self, ControlsCommand.self, StagesCommand.self, BenchCommand.self]
    }
}
