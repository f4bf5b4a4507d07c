// The whole `viewfinder` command line with the user's stages added ("Writing a stage", Step 7):
//
//   swift run my-viewfinder run --device sim --stages negative:strength=0.5 --metadata m.jsonl
//   swift run my-viewfinder bench --stages negative,stabilise
//   swift run my-viewfinder stages
import MyStages
import ViewfinderCommandLine
import ViewfinderKit

let stages: StageRegistry
do { stages = try StageRegistry.builtIn.merging(.myStages) } catch { fatalError("\(error)") }
ViewfinderCommandLine.main(stages: stages)
