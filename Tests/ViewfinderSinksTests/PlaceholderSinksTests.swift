import Testing
@testable import ViewfinderSinks
