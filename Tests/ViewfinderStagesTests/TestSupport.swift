import Testing
import Viewfinder
@testable import ViewfinderStages
