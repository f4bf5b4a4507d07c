import Testing
@testable import ViewfinderStages
