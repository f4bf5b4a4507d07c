import Viewfinder
