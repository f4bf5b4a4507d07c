import Testing
@testable import StageRegistryGenerator

/// The generator's scanning, on fixture sources.
@Suite struct ScannerTests {
    func stages(_ files: [String: String]) throws -> [FoundStage] {
        let decls = files.sorted { $0.key < $1.key }.flatMap { StageScanner.declarations(in: $0.value, file: $0.key) }
        return try StageScanner.stages(in: decls)
    }

    func diagnostics(_ files: [String: String]) -> [Diagnostic] {
        do { _ = try stages(files); return [] } catch let e as ScanFailure { return e.diagnostics } catch { return [] }
    }

    @Test func findsDirectConformancesNestedTypesAndProtocolsThatRefineStage() throws {
        let found = try stages(["A.swift": """
            import Viewfinder
            public final class Blur: Stage { public static let name = "blur" }
            // final class Commented: Stage {}
            let text = "final class InAString: Stage {}"
            /* final class InABlockComment: Stage {} */
            public enum Filters {
                public final class Sharpen: Viewfinder.Stage {}
            }
            protocol TunableStage: Stage {}
            final class Tuned: TunableStage {}
            final class Plain {}
            """])
        #expect(found.map(\.name) == ["Blur", "Filters.Sharpen", "Tuned"])
        #expect(found.map(\.line) == [2, 7, 10])
        #expect(found.map(\.isPublic) == [true, true, false])
    }

    @Test func findsConformancesDeclaredInExtensions() throws {
        let found = try stages([
            "Denoise.swift": """
                public final class Denoise {
                    init(options: NoOptions) {}
                }
                """,
            "Denoise+Stage.swift": """
                extension Denoise: Stage {
                    public static let name = "denoise"
                }
                extension Frame: CustomStringConvertible {}
                """,
            "Imported.swift": """
                public extension OtherModuleStage: Stage where Self: AnyObject {}
                """,
        ])
        #expect(found.map(\.name) == ["Denoise", "OtherModuleStage"])
        #expect(found.first { $0.name == "Denoise" }?.file == "Denoise.swift")
        #expect(found.first { $0.name == "OtherModuleStage" }?.isPublic == true)
    }

    @Test func aGenericStageIsRegisteredThroughItsConcreteSubclasses() throws {
        let found = try stages(["G.swift": """
            class Averaging<Accumulator: BinaryInteger>: Stage {
                init(options: NoOptions) {}
            }
            final class Averaging32: Averaging<Int32> {}
            """])
        #expect(found.map(\.name) == ["Averaging32"])
    }

    @Test func whatCannotBeRegisteredFailsWithTheFileAndLine() {
        let generic = diagnostics(["Stages/Generic.swift": """
            import Viewfinder

            final class Median<T>: Stage
                where T: Comparable {
                init(options: NoOptions) {}
            }
            """])
        #expect(generic.count == 1)
        #expect(generic.first?.file == "Stages/Generic.swift" && generic.first?.line == 3)
        #expect(generic.first?.description.hasPrefix("Stages/Generic.swift:3: error: generic stage class 'Median'") == true)

        let hidden = diagnostics(["P.swift": "\n\nprivate final class Hidden: Stage {}\n"])
        #expect(hidden.map(\.line) == [3])
        #expect(hidden.first?.message.contains("private") == true)

        let local = diagnostics(["L.swift": """
            func make() {
                final class Local: Stage {}
            }
            """])
        #expect(local.map(\.line) == [2])

        let extended = diagnostics(["E.swift": """
            final class Box<T> {}
            extension Box: Stage where T == Int {}
            """])
        #expect(extended.map(\.line) == [2])
    }

    @Test func lineNumbersSurviveMultiLineCommentsAndStrings() throws {
        let found = try stages(["M.swift": """
            /*
             a comment
             over lines
            */
            let s = \"\"\"
                text
                \"\"\"
            final class After: Stage {}
            """])
        #expect(found.map(\.line) == [8])
    }

    @Test func theRegistryIsRenderedWithEveryTypeAndItsPlace() {
        let text = StageScanner.render(module: "MyStages", stages: [FoundStage(name: "Blur", isPublic: true, file: "Blur.swift", line: 4)])
        #expect(text.contains("public static let myStages: StageRegistry = StageRegistry(generated: ["))
        #expect(text.contains("        Blur.self, // Blur.swift:4\n"))
        #expect(StageScanner.lowerCamel("ViewfinderStages") == "viewfinderStages")
        #expect(StageScanner.lowerCamel("CVStages") == "cvStages")
    }
}
