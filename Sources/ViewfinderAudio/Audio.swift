import Viewfinder
import CALSA
