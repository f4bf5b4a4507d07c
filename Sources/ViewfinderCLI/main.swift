import ViewfinderKit
print(StageRegistry.builtIn.names)
