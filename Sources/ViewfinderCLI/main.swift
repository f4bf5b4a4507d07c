// The `viewfinder` command: the command line of ViewfinderCommandLine with the built-in stages.
// (A program of your own can run the same command line with its stages too:
// `ViewfinderCommandLine.main(stages: try .builtIn.merging(.myStages))`.)
import ViewfinderCommandLine

ViewfinderCommandLine.main()
