import Testing
@testable import ViewfinderV4L2
