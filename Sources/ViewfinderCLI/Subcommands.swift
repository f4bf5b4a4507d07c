import ArgumentParser

/// The subcommands, in the order `--help` shows them.
enum CLISubcommands {
    static var all: [any ParsableCommand.Type] {
        [RunCommand.self, DevicesCommand.self, StagesCommand.self]
    }
}
