import PackagePlugin

/// Generates `StageRegistry.<module>` for a target: every class in the target's sources that
/// conforms to `Stage` is registered. Adding a stage is adding one file.
@main
struct StageRegistryPlugin: BuildToolPlugin {
    enum PluginError: Error, CustomStringConvertible {
        case notASourceTarget(String)
        var description: String {
            switch self {
            case .notASourceTarget(let n): return "StageRegistryPlugin applies to Swift source targets; '\(n)' is not one"
            }
        }
    }

    func createBuildCommands(context: PluginContext, target: Target) async throws -> [Command] {
        guard let target = target as? SourceModuleTarget else { throw PluginError.notASourceTarget(target.name) }
        let sources = target.sourceFiles(withSuffix: "swift").map(\.url)
        let output = context.pluginWorkDirectoryURL.appending(path: "GeneratedStageRegistry.swift")
        let tool = try context.tool(named: "StageRegistryGenerator")
        return [
            .buildCommand(
                displayName: "Registering the stages of \(target.moduleName)",
                executable: tool.url,
                arguments: [target.moduleName, output.path()] + sources.map { $0.path() },
                inputFiles: sources,
                outputFiles: [output]
            )
        ]
    }
}
