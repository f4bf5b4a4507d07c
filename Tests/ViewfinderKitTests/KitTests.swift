import Testing
@testable import ViewfinderKit
